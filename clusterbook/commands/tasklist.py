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


def task_operations(cluster_file: str) -> list:
    """The runbook tasks of a cluster file; when it cannot be loaded, the cluster-wide ones only (running any
    task then reports the file's problems)."""
    try:
        return operations(load_cluster(cluster_file))
    except InputError:
        return [Operation("deploy", n, n, f"{n} (the cluster file {cluster_file} does not load: run it to see why)")
                for n in ("install", "router", "gateway", "slurm")] + \
               [Operation("models", "fetch", "models", "Fetch the models each node serves.")]


