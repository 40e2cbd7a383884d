"""What each task does, in terms of the layers: load, plan, render, run, check, report. tasks.py calls these."""

from .acceptance import demo, verify
from .bench import bench, rehearse, tune
from .cluster import check, plan, render, write_reference
from .lab import LAB_CLUSTER, LAB_SLURM_CLUSTER, lab_down, lab_restart, lab_status, lab_up, ssh_command
from .runbooks import cluster_for_tasks, default_cluster, logs, run_runbook, status, task_operations, tier_runbook
from .site import docs

__all__ = ["LAB_CLUSTER", "LAB_SLURM_CLUSTER", "bench", "check", "cluster_for_tasks", "default_cluster", "demo", "docs",
           "lab_down", "lab_restart", "lab_status", "lab_up", "logs", "plan", "rehearse", "render", "run_runbook",
           "ssh_command", "status", "task_operations", "tier_runbook", "tune", "verify", "write_reference"]
