"""What each task does, in terms of the layers: load, plan, render, run, check, report. tasks.py calls these."""

from clusterbook.commands.acceptance import demo, verify
from clusterbook.commands.bench import bench, fabric, recovery, rehearse, tune
from clusterbook.commands.change import apply, rollback
from clusterbook.commands.cluster import check, models_hash, plan, preflight, render, write_reference
from clusterbook.commands.lab import (
    LAB_CLUSTER,
    LAB_SLURM_CLUSTER,
    lab_down,
    lab_restart,
    lab_status,
    lab_up,
    ssh_command,
)
from clusterbook.commands.runbooks import (
    cluster_for_tasks,
    cluster_on_command_line,
    default_cluster,
    logs,
    run_operation,
    run_runbook,
    status,
    task_operations,
)
from clusterbook.commands.settings import DEFAULTS as SETTINGS_DEFAULTS
from clusterbook.commands.settings import configure
from clusterbook.commands.site import docs
from clusterbook.commands.site import publish as publish_docs
from clusterbook.effects.console import Failed

__all__ = [
    "LAB_CLUSTER",
    "LAB_SLURM_CLUSTER",
    "SETTINGS_DEFAULTS",
    "Failed",
    "apply",
    "bench",
    "check",
    "cluster_for_tasks",
    "cluster_on_command_line",
    "configure",
    "default_cluster",
    "demo",
    "docs",
    "fabric",
    "lab_down",
    "lab_restart",
    "lab_status",
    "lab_up",
    "logs",
    "models_hash",
    "plan",
    "preflight",
    "publish_docs",
    "recovery",
    "rehearse",
    "render",
    "rollback",
    "run_operation",
    "run_runbook",
    "ssh_command",
    "status",
    "task_operations",
    "tune",
    "verify",
    "write_reference",
]
