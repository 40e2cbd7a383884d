"""Rendering is deterministic and matches the golden files (UPDATE_GOLDEN=1 rewrites them after review)."""

import os
from pathlib import Path

import pytest

from clusterbook.effects.files import write_tree
from clusterbook.model.loader import load_cluster
from clusterbook.pure.render.artifacts import render_artifacts

from ..conftest import CLUSTERS, ROOT

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["beefcake2", "ridge"])
def test_render_matches_golden(name, tmp_path):
    write_tree(render_artifacts(load_cluster(CLUSTERS[name])), tmp_path)
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        import shutil
        shutil.rmtree(golden, ignore_errors=True)
        shutil.copytree(tmp_path, golden)
    got, want = tree(tmp_path), tree(golden)
    assert sorted(got) == sorted(want), "the set of rendered files changed"
    for rel in want:
        assert got[rel] == want[rel], f"{rel} differs from tests/golden/{name}/{rel}"


@pytest.mark.parametrize("name", ["beefcake2", "ridge", "mini"])
def test_render_is_byte_identical_twice(name, tmp_path):
    cluster = load_cluster(CLUSTERS[name])
    write_tree(render_artifacts(cluster), tmp_path / "a")
    write_tree(render_artifacts(load_cluster(CLUSTERS[name])), tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_executables_are_executable(tmp_path, beefcake2):
    write_tree(render_artifacts(beefcake2), tmp_path)
    selector = tmp_path / "vasp-01/usr/local/bin/llama-model-selector"
    assert selector.stat().st_mode & 0o111
    unit = tmp_path / "vasp-01/etc/systemd/system/clusterbook-gpu-metrics.service"
    assert not unit.stat().st_mode & 0o111


def test_a_tier_gets_only_its_own_managers_files(beefcake2):
    """beefcake2's tiers are SLURM jobs: no node gets a systemd unit that no deploy installs; the lab's systemd
    tiers get no batch script."""
    paths = {a.path for a in render_artifacts(beefcake2)}
    assert not {"/etc/systemd/system/llama-reasoning.service", "/etc/systemd/system/llama-fast.service",
                "/etc/systemd/system/llama-rpc-reasoning.service"} & paths
    assert {"/etc/llama/slurm/llama-reasoning.sbatch", "/etc/llama/slurm/llama-fast.sbatch"} <= paths
    lab = {a.path for a in render_artifacts(load_cluster(ROOT / "lab/cluster.yaml"))}
    assert "/etc/systemd/system/llama-reasoning.service" in lab and not any(p.endswith(".sbatch") for p in lab)


def test_a_job_asking_more_nodes_waits_behind_one_asking_fewer(beefcake2):
    """SLURM's main pass stops at a partition's first job that cannot start: a multi-node tier's pending job must not
    hold back a single-node tier's (slurmjob.job_nice); nice is never negative (a user may only lower priority)."""
    from clusterbook.pure.slurmjob import job_nice
    scripts = {a.tier: a.text for a in render_artifacts(beefcake2) if a.id == "sbatch"}
    assert "#SBATCH --nodes=2\n#SBATCH --nice=10\n" in scripts["reasoning"]  # the head and one worker
    assert "--nice" not in scripts["fast"]
    assert (job_nice(beefcake2.tier("fast")), job_nice(beefcake2.tier("reasoning"))) == (0, 10)
