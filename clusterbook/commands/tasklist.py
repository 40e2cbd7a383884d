"""What tasks.py needs before invoke parses the command line: the configured cluster file and its operations,
which become the task list. Light on purpose: `invoke --list` imports only this."""

from __future__ import annotations

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
