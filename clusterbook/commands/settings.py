"""Where the tasks find things (the cluster file, reports/, runs/): invoke's configuration, read in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from invoke import Config

PROJECT = Path(__file__).resolve().parents[2]  # where tasks.py and invoke.yaml live

# invoke's configuration key `clusterbook`; override in invoke.yaml (project), ~/.invoke.yaml (user),
# /etc/invoke.yaml (system), `invoke -f FILE` (runtime) or the environment: INVOKE_CLUSTERBOOK_CLUSTER=lab/cluster.yaml
DEFAULTS = {"cluster": "cluster.yaml", "reports": "reports", "runs": "runs"}
LAB_CLUSTER = "lab/cluster.yaml"  # the lab in the same schema (systemd tiers)
LAB_SLURM_CLUSTER = "lab/cluster-slurm.yaml"  # containers of its own (slab1-3): SLURM tiers and the gateway


@dataclass(frozen=True)
class Settings:
    cluster: str  # the cluster file a task uses when --cluster is not given
    reports: Path  # verify, bench and tuning reports
    runs: Path  # one JSON-lines log per runbook run


def of(values: Mapping) -> Settings:
    """Settings from invoke's configuration key `clusterbook` (a task's `c.config.clusterbook`), over the defaults."""
    merged = {**DEFAULTS, **dict(values)}
    return Settings(str(merged["cluster"]), Path(merged["reports"]), Path(merged["runs"]))


def read() -> Settings:
    """The settings read as invoke reads them, where no task's configuration is at hand: for the task list (made
    before invoke parses the command line) and in processes invoke did not start (docs.serve's MkDocs)."""
    return of(read_invoke_config(os.environ.get("INVOKE_RUNTIME_CONFIG")))


def read_invoke_config(runtime_file: str | None = None) -> Mapping:
    """The `clusterbook` section as invoke would see it: defaults, system, user and project files, a runtime
    file (`invoke -f FILE`), environment."""

    config = Config(defaults={**Config.global_defaults(), "clusterbook": DEFAULTS}, project_location=str(PROJECT),
                    runtime_path=runtime_file)
    config.load_project()
    if runtime_file:
        config.load_runtime()
    config.load_shell_env()
    return config.clusterbook


def as_environment(settings: Settings, **changes) -> dict[str, str]:
    """These settings (with changes) as invoke's environment variables, for a child process to read the same."""
    values = {**{k: str(v) for k, v in vars(settings).items()}, **changes}
    return {f"INVOKE_CLUSTERBOOK_{key.upper()}": str(value) for key, value in values.items()}
