"""Run invoke command lines inside the test process (invoke's Program.run), as a shell would run them: the same
argv, environment and working folder, stdout and stderr captured at the file descriptors (what a task's own
subprocesses print too), the exit status; a run past its time limit ends with status 124. The runner is the
package's own (clusterbook/effects/in_process.py, which the acceptance steps use too). A subprocess is left for
the tests whose subject is the process itself (exit paths, pipes, the network namespace of --dry)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from invoke import Program

from clusterbook.effects.in_process import run_program

ROOT = Path(__file__).resolve().parents[1]


def run_invoke(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
               timeout: float = 1800) -> subprocess.CompletedProcess:
    """`invoke ARGV…` in this process; `env` adds to (and for the run replaces entries of) os.environ."""
    return run_program(lambda: Program(version="in-process"), ["invoke", *argv], env=env, cwd=cwd, timeout=timeout)
