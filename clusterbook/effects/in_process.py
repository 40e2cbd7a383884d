"""Tasks and pytest sessions run inside this process as a shell runs them: output captured, a deadline, a status."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

TIMED_OUT = 124  # the status timeout(1) gives a command it stopped


class OverDeadline(KeyboardInterrupt):
    """Raised in the main thread when a deadline passes. A KeyboardInterrupt, so it ends what runs as Ctrl-C does:
    pytest stops its session (writing its reports), invoke exits 1, and no task's `except Exception` swallows it."""


def within(seconds: float | None, what: str, run: Callable[[], object]) -> tuple[bool, object]:
    """`run()` with the real-time alarm set `seconds` ahead: (True, its result), or (False, None) once it ran past
    them. Deadlines nest: an outer one due first stays set and ends the inner run (a pytest session inside takes it
    as an interruption, and the outer run still reads its deadline as passed). Off the main thread (signals reach
    only it), or with `seconds` None, no deadline is set."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        return True, run()
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:  # the outer deadline comes first: it stays
        return True, run()
    fired: list[bool] = []

    def fire(signum, frame):
        fired.append(True)
        raise OverDeadline(f"{what}: over its {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, fire)
    started = time.monotonic()
    result: object = None
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        result = run()
    except BaseException:  # the interruption, or how the run ended because of it (invoke exits 1 on it)
        if not fired:
            raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 0.001))
    if fired:
        return False, None
    return True, result


@contextlib.contextmanager
def captured() -> Iterator[Callable[[], tuple[str, str]]]:
    """fds 1 and 2, and sys.stdout/sys.stderr over them, into two files (what subprocesses print too); yields a
    function that reads them."""
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
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        for f in files:
            f.close()


@contextlib.contextmanager
def environment(env: dict[str, str] | None = None, cwd: Path | str | None = None,
                argv: list[str] | None = None) -> Iterator[None]:
    """os.environ with `env` added, the working folder and sys.argv, for the run; all put back after it."""
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    try:
        os.environ.update(env or {})
        if argv is not None:
            sys.argv = argv
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)


def exit_status(exc: SystemExit) -> int:
    """The status a shell reads from a SystemExit (a message instead of a number is printed and means 1)."""
    if isinstance(exc.code, int):
        return exc.code
    if exc.code is not None:
        print(exc.code, file=sys.stderr)
        return 1
    return 0


def run_program(run: Callable[[], None], line: list[str], *, env: dict[str, str] | None = None,
                cwd: Path | str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`run()`, which runs the command line `line` (its program's name first) in this process, with that line as
    sys.argv and its output captured; past `timeout` it ends with status 124, and a SystemExit is its status."""
    code = 0
    with captured() as read:
        try:
            with environment({"COLUMNS": os.environ.get("COLUMNS", "200"), **(env or {})}, cwd, line):
                finished, _ = within(timeout, " ".join(line), run)
            if not finished:
                code = TIMED_OUT
                print(f"in-process {' '.join(line)}: over its {timeout:g} s", file=sys.stderr)
        except SystemExit as exc:
            code = exit_status(exc)
        stdout, stderr = read()
    return subprocess.CompletedProcess(line, code, stdout, stderr)


@dataclass(frozen=True)
class PytestRun:
    """How a pytest session in this process ended."""

    status: int  # pytest's exit status (0-5), or TIMED_OUT
    output: str  # what it printed, where it was captured

    @property
    def timed_out(self) -> bool:
        return self.status == TIMED_OUT


def run_pytest(args: list[str], *, env: dict[str, str] | None = None, quiet: bool = False,
               timeout: float | None = None) -> PytestRun:
    """`pytest ARGS…` in this process (its own session, config and plugins): printed as it runs, or captured
    when `quiet`; past `timeout` the session is interrupted as by Ctrl-C, its reports written."""
    import pytest  # lazy: pytest (0.1 s) only where scenarios run (verify, apply)

    def session() -> int:
        with environment(env):
            return int(pytest.main(args))
    with captured() if quiet else contextlib.nullcontext(lambda: ("", "")) as read:
        finished, status = within(timeout, "pytest", session)
        stdout, stderr = read()
    return PytestRun(int(status) if finished else TIMED_OUT, stdout + stderr)
