"""What each task does, in terms of the layers: load, plan, render, run, check, report. tasks.py calls these.

Each name is imported from its module on first use (PEP 562), so `invoke --list` and a no-op deploy load only the
modules they run: a benchmark's, the docs build's and the lab's imports stay out of every other task."""

from __future__ import annotations

from importlib import import_module

# name tasks.py uses -> (module under clusterbook.commands, or a full module path; its attribute). No name is a
# module's: once that module is imported, Python sets the package's attribute of its name to the module itself
WHERE = {
    **{n: ("acceptance", n) for n in ("demo", "verify")},
    "run_bench": ("bench", "bench"),
    **{n: ("bench", n) for n in ("fabric", "faults", "recovery", "rehearse", "tune")},
    **{n: ("rollout", n) for n in ("apply", "rollback")},
    **{n: ("cluster", n) for n in ("check", "models_hash", "plan", "render", "ssh_config", "write_reference")},
    "run_preflight": ("preflight", "preflight"),
    "accept_folder": ("accept", "accept_folder"),
    **{n: ("lab", n) for n in ("lab_down", "lab_restart", "lab_status", "lab_up", "ssh_command")},
    **{n: ("runbooks", n) for n in ("logs", "run_named", "run_operation", "run_runbook", "status")},
    **{n: ("tasklist", n) for n in ("check_command_line", "command_line_operations", "default_cluster",
                                    "TIER_COLLECTIONS", "task_operations")},
    "LAB_CLUSTER": ("settings", "LAB_CLUSTER"),
    "LAB_SLURM_CLUSTER": ("settings", "LAB_SLURM_CLUSTER"),
    "SETTINGS_DEFAULTS": ("settings", "DEFAULTS"),
    "settings_of": ("settings", "of"),
    "docs": ("docs_build", "docs"),
    "publish_docs": ("docs_build", "publish"),
    "Failed": ("clusterbook.effects.console", "Failed"),
    "Refused": ("clusterbook.model.problems", "Refused"),
}
__all__ = sorted(WHERE)


def __getattr__(name: str):
    if name not in WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = WHERE[name]
    value = getattr(import_module(module if "." in module else f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value
