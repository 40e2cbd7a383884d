"""What tasks.py needs before invoke parses the command line: the configured cluster file and its operations,
which become the task list. Light on purpose: `invoke --list` imports only this."""

from __future__ import annotations

import sys

from clusterbook.commands import settings
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.operations import Operation, operations


def default_cluster() -> str:
    """The configured cluster file (clusterbook.cluster), as invoke will read it, for the task list."""
    return settings.read().cluster


def command_line_cluster(tokens: list[str]) -> str | None:
    """The value of the first --cluster F, --cluster=F, or -c F after a task's name, among the tokens invoke left
    after its own flags (it makes its task list before it parses them: `invoke deploy.chat --cluster F` needs F's
    tiers)."""
    after_task = False
    for i, arg in enumerate(tokens):
        if arg.startswith("--cluster="):
            return arg.split("=", 1)[1]
        if (arg == "--cluster" or (arg == "-c" and after_task)) and i + 1 < len(tokens):
            return tokens[i + 1]
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




def command_line_operations(named: str | None) -> list:
    """The task list's operations: the command line's file's, else the configured file's (a task the file lacks
    is refused by check_command_line, naming the file's tiers)."""
    return task_operations(named or default_cluster())


TIER_COLLECTIONS = ("deploy", "models", "stop", "restart", "restore")  # tasks.py's collections of the file's tasks
FIXED = {"deploy.tier", "stop.tier", "restart.tier", "models.hash"}  # tasks.py's own tasks in these collections


def unknown_tier_task(tokens: list[str], ops: list, named: str | None) -> str | None:
    """What to say of a task of the tier collections that the file does not have (invoke would answer only "No idea
    what 'deploy.chat' is!"): the tiers the file has and its tasks in that collection, or, where the file does not
    load, its problems (file, line, field)."""
    known = {op.task for op in ops} | FIXED
    for arg in tokens:
        if "." in arg and not arg.startswith("-") and arg.split(".")[0] in TIER_COLLECTIONS and arg not in known:
            collection = arg.split(".")[0]
            named = named or default_cluster()
            try:
                own = operations(load_cluster(named))
            except InputError as e:
                return f"no task {arg}: {named} does not load, so its tiers are unknown:\n{e}"
            tiers = sorted({op.tier for op in own if op.tier})
            tasks = sorted(op.task for op in own if op.collection == collection) + [f"{collection}.tier --tier T"] * (
                collection in ("deploy", "stop", "restart"))
            return (f"no task {arg} for {named}: its tiers are {', '.join(tiers) or 'none'}; "
                    f"its {collection} tasks: {', '.join(tasks)}")
    return None


def check_command_line(tokens: list[str], ops: list, named: str | None) -> None:
    """Before invoke parses the tasks: an unknown tier task is refused naming the file's tiers (exit status 2)."""
    message = unknown_tier_task(tokens, ops, named)
    if message:
        print(message, file=sys.stderr)
        sys.exit(2)
