"""Terminal output: one rich console, and the translation of clusterbook errors into exit statuses."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from rich.console import Console
from rich.markup import escape

from clusterbook.model.problems import InputError, Refused

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
F = TypeVar("F", bound=Callable)


class Failed(Exception):
    """A command ran and found something wrong (exit status 1); the message says what."""


WAITING_EXIT = 3  # a task did what it could and a tier waits for SLURM to give it its nodes: neither done nor failed
WAITED: list[str] = []  # this process's waits, one line each (tier, job, who holds its nodes, until when)


def waits(message: str) -> None:
    """A tier waits for its nodes (another job, VASP's on beefcake2, holds them): say so; the command line's tasks
    go on, and the process ends with WAITING_EXIT (adapters/command_line.py)."""
    WAITED.append(message)
    console.print(f"[bold cyan]waiting[/] (not a failure; exit status {WAITING_EXIT} at the end): {escape(message)}",
                  soft_wrap=True, highlight=False)


def exits_cleanly(fn: F) -> F:
    """Run a command; bad input exits 2 and failures exit 1, each with a message and no traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            for problem in exc.problems:
                errors.print(str(problem), markup=False, soft_wrap=True)
            errors.print(f"{len(exc.problems)} problem(s); nothing was changed.", style="bold red")
            sys.exit(2)
        except Refused as exc:
            errors.print(f"{exc}; nothing was written.", style="bold red", markup=False, soft_wrap=True)
            sys.exit(2)
        except Failed as exc:
            errors.print(str(exc), style="bold red", markup=False, soft_wrap=True)
            sys.exit(1)
    return wrapper  # type: ignore[return-value]


def end_process(code: int) -> None:
    """End a command-line process the quick way: the exit handlers run and the terminal is flushed, as at any exit,
    but the interpreter does not then free its objects one by one (0.05 s of a 0.5 s no-op deploy: pydantic's
    validators, Jinja, invoke); the operating system takes the memory back at once. Files clusterbook writes are
    closed by then (`with` blocks). Returns, for the usual exit, while another thread still runs."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return None
    atexit._run_exitfuncs()  # what the interpreter runs at exit (logging's flush, weakref finalizers, …)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away (| head), a closed stream
            stream.flush()
    os._exit(code)
