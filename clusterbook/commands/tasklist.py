"""What tasks.py needs before invoke parses the command line: the cluster file it names (or the configured one)
and that file's operations, which become the task list. Light on purpose: `invoke --list` imports only this."""

from __future__ import annotations

from clusterbook.commands import settings
from clusterbook.effects.console import Failed
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.operations import Operation, operations


def default_cluster() -> str:
    """The cluster file tasks use when --cluster is not given: the configuration's clusterbook.cluster."""
    return settings.current().cluster


def cluster_on_command_line(argv: list[str]) -> str | None:
    """The --cluster value of an invoke command line. invoke gives a flag to the one task it follows, but an
    operator who writes `invoke stop.fast stop.reasoning --cluster lab/cluster.yaml` means both tasks: one value
    counts for every task of the line (two different values are refused)."""
    values = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--cluster"}
    values |= {arg.split("=", 1)[1] for arg in argv if arg.startswith("--cluster=")}
    if len(values) > 1:
        raise Failed(f"--cluster given twice with different files ({', '.join(sorted(values))}): one command line "
                     "runs against one cluster")
    return values.pop() if values else None


def cluster_for_tasks(argv: list[str]) -> str:
    """The cluster file an invoke command line will use, known before invoke parses it (the task list depends on
    it): its --cluster value, else the configured one (reading `-f FILE` as invoke will)."""
    given = cluster_on_command_line(argv)
    if given:
        return given
    runtime_file = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("-f", "--config")), None)
    return str(settings.read_invoke_config(runtime_file)["cluster"]) if runtime_file else default_cluster()


def task_operations(cluster_file: str) -> list:
    """The runbook tasks of a cluster file; when it cannot be loaded, the cluster-wide ones only (running any
    task then reports the file's problems)."""
    try:
        return operations(load_cluster(cluster_file))
    except InputError:
        return [Operation("deploy", n, n, f"{n} (the cluster file {cluster_file} does not load: run it to see why)")
                for n in ("install", "router", "gateway", "slurm")] + \
               [Operation("models", "fetch", "models", "Fetch the models each node serves.")]


