"""Run invoke command lines inside the test process (invoke's Program.run), as a shell would run them: the same
argv, environment and working folder, stdout and stderr captured at the file descriptors (what a task's own
subprocesses print too), the exit status; a run past its time limit ends with status 124. The runner is the
package's own (adapters/command_line.run_line, which the acceptance steps use too). A subprocess is left for
the tests whose subject is the process itself (exit paths, pipes, the network namespace of --dry)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from invoke import Program

from clusterbook.adapters.command_line import run_line

ROOT = Path(__file__).resolve().parents[1]


def run_invoke(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
               timeout: float = 1800) -> subprocess.CompletedProcess:
    """`invoke ARGV…` in this process; `env` adds to (and for the run replaces entries of) os.environ."""
    return run_line(lambda: Program(version="in-process"), ["invoke", *argv], env=env, cwd=cwd, timeout=timeout)
