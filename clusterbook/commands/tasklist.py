"""What tasks.py needs before invoke parses the command line: the configured cluster file and its operations,
which become the task list. Light on purpose: `invoke --list` imports only this."""

from __future__ import annotations

import os
import sys

from clusterbook.commands import settings
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.operations import Operation, operations


def default_cluster() -> str:
    """The configured cluster file (clusterbook.cluster), as invoke will read it, for the task list."""
    return settings.read().cluster


def command_line_cluster(argv: list[str]) -> str | None:
    """The value of the first --cluster F, --cluster=F, or -c F after a task's name, on an invoke command line
    (invoke makes its task list before it parses the line: `invoke deploy.chat --cluster F` needs F's tiers)."""
    after_task = False
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("--cluster="):
            return arg.split("=", 1)[1]
        if (arg == "--cluster" or (arg == "-c" and after_task)) and i + 1 < len(argv):
            return argv[i + 1]
        after_task = after_task or not arg.startswith("-")
    return None


def task_operations(cluster_file: str) -> list:
    """The runbook tasks of a cluster file; when it cannot be loaded, the cluster-wide ones only (running any
    task then reports the file's problems)."""
    try:
        return operations(load_cluster(cluster_file))
    except InputError:
        return [Operation("deploy", n, n, f"{n} (the cluster file {cluster_file} does not load: run it to see why)")
                for n in ("install", "router", "gateway", "slurm")] + \
               [Operation("models", "fetch", "models", "Fetch the models each node serves.")]




def command_line_operations(argv: list[str]) -> list:
    """The task list's operations: the command line's file's, then the configured file's it lacks (such a task
    runs, and says the named file has no such operation)."""
    configured = default_cluster()
    named = command_line_cluster(argv)
    found = task_operations(named) if named else []
    have = {(op.collection, op.name) for op in found}
    return found + [op for op in task_operations(configured) if (op.collection, op.name) not in have]


FIXED = {"deploy.tier", "stop.tier", "restart.tier", "models.hash"}  # tasks.py's own tasks in these collections


def listing_cluster(argv: list[str]) -> str | None:
    """F of `invoke --list --cluster F` (invoke would read --cluster as --list's namespace)."""
    for i, arg in enumerate(argv[1:-1], 1):
        if arg in ("--list", "-l"):
            nxt = argv[i + 1]
            if nxt.startswith("--cluster="):
                return nxt.split("=", 1)[1]
            if nxt == "--cluster" and i + 2 < len(argv):
                return argv[i + 2]
    return None


def unknown_tier_task(argv: list[str], ops: list) -> str | None:
    """What to say of a task of the tier collections that the file does not have (invoke would answer only "No idea
    what 'deploy.chat' is!"): the tiers the file has, and its tasks in that collection."""
    collections = {op.collection for op in ops}
    known = {op.task for op in ops} | FIXED
    for arg in argv[1:]:
        if "." in arg and not arg.startswith("-") and arg.split(".")[0] in collections and arg not in known:
            collection = arg.split(".")[0]
            named = command_line_cluster(argv) or default_cluster()
            own = task_operations(named)
            tiers = sorted({op.tier for op in own if op.tier})
            tasks = sorted(op.task for op in own if op.collection == collection) + [f"{collection}.tier --tier T"] * (
                collection in ("deploy", "stop", "restart"))
            return (f"no task {arg} for {named}: its tiers are {', '.join(tiers) or 'none'}; "
                    f"its {collection} tasks: {', '.join(tasks)}")
    return None


def check_command_line(argv: list[str], ops: list, relist: bool) -> None:
    """Before invoke parses the line: `--list --cluster F` lists F's tasks (with `relist`, in invoke's own process:
    invoke again, with F configured); an unknown tier task is refused naming the file's tiers (exit status 2)."""
    listed = listing_cluster(argv) if relist else None
    if listed is not None:
        env = {**os.environ, **settings.as_environment(settings.read(), cluster=listed)}
        os.execve(sys.executable, [sys.executable, "-m", "invoke", "--list"], env)
    message = unknown_tier_task(argv, ops)
    if message:
        print(message, file=sys.stderr)
        sys.exit(2)

