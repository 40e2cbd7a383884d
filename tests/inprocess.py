"""Run invoke command lines inside the test process (invoke's Program.run), as a shell would run them: the same
argv, environment and working folder, stdout and stderr captured at the file descriptors (what a task's own
subprocesses print too), the exit status; a run past its time limit ends with status 124. A subprocess is left for
the tests whose subject is the process itself (exit paths, pipes, the network namespace of --dry)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from invoke import Program

from clusterbook.adapters.command_line import running

ROOT = Path(__file__).resolve().parents[1]


class _TimedOut(BaseException):
    """Raised in the task by the alarm; a BaseException, so no `except Exception` in a task swallows it."""


@contextlib.contextmanager
def _captured():
    """fds 1 and 2, and sys.stdout/sys.stderr over them, into two files; yields a function that reads them."""
    files = [tempfile.TemporaryFile(mode="w+b"), tempfile.TemporaryFile(mode="w+b")]  # noqa: SIM115  closed below
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    saved_streams = sys.stdout, sys.stderr
    try:
        for fd, f in zip((1, 2), files):
            os.dup2(f.fileno(), fd)
        sys.stdout = open(1, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115

        def read() -> tuple[str, str]:
            sys.stdout.flush()
            sys.stderr.flush()
            out = []
            for f in files:
                f.seek(0)
                out.append(f.read().decode(errors="replace"))
            return out[0], out[1]
        yield read
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        for f in files:
            f.close()


def run_invoke(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
               timeout: float = 1800) -> subprocess.CompletedProcess:
    """`invoke ARGV…` in this process; `env` adds to (and for the run replaces entries of) os.environ."""
    line = ["invoke", *argv]
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()

    def alarm(signum, frame):
        raise _TimedOut()
    previous = signal.signal(signal.SIGALRM, alarm)
    code = 0
    with _captured() as read:
        try:
            os.environ.update(env or {})
            os.environ["COLUMNS"] = os.environ.get("COLUMNS", "200")
            sys.argv = line
            os.chdir(cwd)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            with running(Program(version="in-process")) as program:  # tasks.py reads its parse
                program.run(line, exit=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        except _TimedOut:
            code = 124
            print(f"in-process invoke {' '.join(argv)}: over its {timeout:g} s", file=sys.stderr)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
        stdout, stderr = read()
    return subprocess.CompletedProcess(line, code, stdout, stderr)
