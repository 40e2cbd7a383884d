"""Heavy work on a node SLURM tiers run on asks SLURM for its CPUs and memory in the tiers' partition and QoS, niced
(pure/allocation.py), table-driven: beefcake2's build and downloads, the SLURM lab's, and nodes no SLURM tier runs on
(only niced); the rendered commands parse (bash -n) and nothing of them runs outside the allocation."""

from __future__ import annotations

import subprocess

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.allocation import build_cpus, heavy
from clusterbook.pure.runbooks import available, expand

from .edits import ROOT

SRUN = "srun --job-name=clusterbook-{} --partition={} {}--nodelist={} --nodes=1 --ntasks=1 --cpus-per-task={} " \
       "--mem={}G --kill-on-bad-exit=1 nice -n 19"


@pytest.mark.parametrize("cluster, node, cpus, label, expected", [
    ("cluster.yaml", "vasp-01", 8, "build", SRUN.format("build", "gpu_ai", "--qos=ai_opportunistic ", "vasp-01", 8,
                                                           24)),
    ("cluster.yaml", "vasp-02", 1, "models", SRUN.format("models", "gpu_ai", "--qos=ai_opportunistic ", "vasp-02", 1,
                                                            3)),
    ("cluster.yaml", "slurm-ctl", 1, "models", "nice -n 19"),  # no SLURM tier runs there
    ("lab/cluster-slurm.yaml", "slab1", 2, "build", SRUN.format("build", "ai", "", "slab1", 2, 1)),  # 4 GB nodes
    ("lab/cluster.yaml", "lab1", 2, "build", "nice -n 19"),  # systemd tiers: no SLURM
])
def test_heavy_work_asks_slurm_where_tiers_run(cluster, node, cpus, label, expected):
    assert heavy(load_cluster(ROOT / cluster), node, cpus, label) == expected


def test_the_build_asks_at_most_a_fifth_of_a_beefcake2_node():
    c = load_cluster(ROOT / "cluster.yaml")
    assert build_cpus(c, "vasp-01") == 8 and build_cpus(load_cluster(ROOT / "lab/cluster-slurm.yaml"), "slab1") == 2


@pytest.mark.parametrize("runbook, tool", [("install", "cmake --build"), ("models", "curl -fsSL")])
def test_beefcake2s_build_and_downloads_run_inside_the_allocation(runbook, tool):
    c = load_cluster(ROOT / "cluster.yaml")
    commands = [a.command for step in expand(available()[runbook], c, None).steps
                for actions in step.hosts.values() for a in actions if hasattr(a, "command")]
    heavy_lines = [line for cmd in commands for line in cmd.splitlines() if tool in line]
    assert heavy_lines and all("srun --job-name=clusterbook-" in line and "nice -n 19 " + tool in line
                               for line in heavy_lines), heavy_lines
    for cmd in commands:
        parsed = subprocess.run(["bash", "-n"], input=cmd, capture_output=True, text=True)
        assert parsed.returncode == 0, (cmd[:300], parsed.stderr)
