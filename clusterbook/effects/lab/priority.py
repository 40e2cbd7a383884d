"""What every lab waits for (the host's llama.cpp build, the root file system) runs ahead of what runs beside it."""

from __future__ import annotations

from pathlib import Path

AHEAD = -15  # nice: a session at -15 weighs about 28 sessions at 0 (Linux's CFS weights 29154 against 1024)
# Linux weighs sessions against each other (autogroups, sched_autogroup_enabled) and a process's nice only within its
# own session: work put ahead sets its session's autogroup nice (root only), and its own where autogroups are off
# (what it starts inherits both).
AUTOGROUP = Path("/proc/self/autogroup")


def ahead(argv: list[str]) -> list[str]:
    """argv put ahead, to be started in a session of its own (start_new_session): a shell sets its autogroup's nice
    and execs it at that nice (where either is not allowed, argv runs all the same)."""
    script = f'echo {AHEAD} > {AUTOGROUP} 2>/dev/null; exec nice -n {AHEAD} "$@"'
    return ["sh", "-c", script, "ahead", *argv]
