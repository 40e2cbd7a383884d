"""invoke's executor for clusterbook (tasks.py names it in `tasks.executor_class`): one --cluster and one --dry
count for every task of a command line, read from what invoke parsed, never from sys.argv."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from invoke import Executor, Program
from invoke.main import program as invoke_program
from invoke.parser import ParserContext

from clusterbook.commands.tasklist import command_line_cluster
from clusterbook.effects.connections import offline
from clusterbook.effects.console import WAITED, WAITING_EXIT, end_process, exits_cleanly
from clusterbook.effects.in_process import run_program
from clusterbook.model.problems import Refused


class CommandLine(Executor):
    """invoke gives a flag to the one task it follows: `invoke stop.fast stop.reasoning --cluster lab/cluster.yaml`
    would stop the configured file's fast tier. Here the line's --cluster (two different ones are refused) and its
    --dry (the task's or invoke's own) go to every task that takes them, before any task runs; a task with no dry
    run refuses --dry (invoke's own --dry does not stop a task from connecting), unless it contacts nothing."""

    def execute(self, *tasks):
        """Run the line's tasks; in invoke's own process, end it when they are done (console.end_process). A line
        whose tasks left a tier waiting for its nodes (console.waits) ends with WAITING_EXIT: not done, not failed."""
        WAITED.clear()
        try:
            results = self.checked(*tasks)
        except SystemExit as exc:  # exits_cleanly's status for bad input (2) or a failure (1)
            if invoked_from_command_line() and isinstance(exc.code, int):
                end_process(exc.code)
            raise
        if invoked_from_command_line():
            end_process(WAITING_EXIT if WAITED else 0)
        if WAITED:  # invoke's Program run inside another process (the tests): the same status
            raise SystemExit(WAITING_EXIT)
        return results

    @exits_cleanly
    def checked(self, *tasks):
        contexts = [t for t in tasks if isinstance(t, ParserContext)]
        given = {ctx.args["cluster"].value for ctx in contexts
                 if "cluster" in ctx.args and ctx.args["cluster"].got_value}
        if len(given) > 1:
            raise Refused(f"--cluster given twice with different files ({', '.join(sorted(given))}): one command line "
                          "runs against one cluster")
        dry = bool(self.config.run.dry) or any(ctx.args["dry"].value for ctx in contexts if "dry" in ctx.args)
        for ctx in contexts:
            if given and "cluster" in ctx.args:
                ctx.args["cluster"].set_value(next(iter(given)))
            if dry and "dry" in ctx.args:
                ctx.args["dry"].set_value(True)
            elif dry and not getattr(self.collection[ctx.name].body, "contacts_nothing", False):
                raise Refused(f"invoke {ctx.name} has no dry run (it would contact the cluster or the lab); run it "
                              "without --dry")
        if dry:
            with offline():  # connections.connect refuses: a dry path that tried to connect fails, naming it
                return super().execute(*tasks)
        return super().execute(*tasks)


@dataclass(frozen=True)
class ParsedLine:
    """What invoke parsed of its command line before it loads tasks.py."""

    tokens: list[str]  # after invoke's own flags: the tasks and their flags, which invoke parses once tasks exist
    listed: str | None  # F of `invoke --list --cluster F`

    @property
    def cluster(self) -> str | None:
        """The command line's cluster file: the listing's, else the first task's --cluster."""
        return self.listed or command_line_cluster(self.tokens)


def parsed_line() -> ParsedLine:
    """invoke's own parse of its flags, in invoke's process (elsewhere, e.g. a test that loads tasks.py: nothing).
    `--list` takes an optional namespace, so invoke reads `--list --cluster F` as the namespace "--cluster" and F as
    a task: F is taken back here and --list lists every task again (tasks.py lists F's), without a second process."""
    program = running_program()
    if program is None:
        return ParsedLine([], None)
    core, listing = program.core, program.args.list
    value, listed = listing.value, None
    if value == "--cluster" and core.unparsed:
        listed = core.unparsed.pop(0)
    elif isinstance(value, str) and value.startswith("--cluster="):
        listed = value.split("=", 1)[1]
    if listed is not None:
        listing.set_value(True, cast=False)  # as invoke stores a bare --list
    return ParsedLine(list(core.unparsed), listed)


PROGRAMS: list[Program] = []  # the programs parsing a command line in this process (clusterbook's, a test's)
COMMAND: list[bool] = []  # this process is the clusterbook command (main)
NESTED: list[Program] = []  # programs run inside this process's own (effects/in_process.py)


@contextmanager
def running(program: Program, nested: bool = False):
    """Let tasks.py read this program's parse while it runs. A nested program (a task run inside another, or inside
    a test) never ends the process, and leaves the outer line's waiting tiers as they were."""
    PROGRAMS.append(program)
    waited = list(WAITED)
    if nested:
        NESTED.append(program)
    try:
        yield program
    finally:
        PROGRAMS.remove(program)
        if nested:
            NESTED.remove(program)
            WAITED[:] = waited


def run_line(make_program: Callable[[], Program], line: list[str], **how) -> subprocess.CompletedProcess:
    """A command line run in this process by a nested program (it never ends the process), as a shell would:
    output captured, exit status, a time limit (effects/in_process.run_program's `env`, `cwd`, `timeout`)."""
    def run() -> None:
        with running(make_program(), nested=True) as program:  # tasks.py reads its parse
            program.run(line, exit=True)
    return run_program(run, line, **how)


def invoked_from_command_line() -> bool:
    """Whether this process is a command line (invoke's script, python -m invoke, or clusterbook), which ends when
    its tasks are done; not a test or a program that runs tasks inside itself."""
    if NESTED:
        return False
    return bool(COMMAND) or getattr(sys.modules.get("__main__"), "program", None) is invoke_program


def running_program() -> Program | None:
    """The program parsing this process's command line: clusterbook's or a test's, else invoke's own."""
    return PROGRAMS[-1] if PROGRAMS else invoke_program if invoked_from_command_line() else None


def quiet_when_the_reader_leaves() -> None:
    """`invoke --list | head`: when whatever reads invoke's output goes away, invoke's own printing raised
    BrokenPipeError and the interpreter printed its traceback. In invoke's own process, such an uncaught error now
    ends it as `head`'s writers usually end (exit status 1, nothing on stderr; the last flush goes to /dev/null).
    clusterbook's own writes to pipes (ssh's stdin) catch their errors and report them as a failed step."""
    if not invoked_from_command_line():
        return
    default = sys.excepthook

    def hook(kind, value, traceback):
        if not issubclass(kind, BrokenPipeError):
            return default(kind, value, traceback)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    sys.excepthook = hook
