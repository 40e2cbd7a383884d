"""What a SLURM tier's job asks (pure/planner/jobask.py), table-driven: beefcake2's asks and what they leave to VASP;
--mem never at or below a measured failure, in the check and in plan --solve's proposal (issue 64: it proposed 58G
for the reasoning tier, whose workers seed 004 saw SIGKILLed at 64G)."""

from __future__ import annotations

import pytest

from clusterbook.commands.cluster import checked_cluster
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import GIB
from clusterbook.pure.planner.jobask import job_ask, proposed_mem
from clusterbook.pure.planner.solver import job_requests

from .edits import ROOT, edited_cluster

REASONING = 1  # beefcake2's tiers: fast, reasoning


@pytest.fixture(scope="module")
def beefcake2():
    return load_cluster(ROOT / "cluster.yaml")


@pytest.mark.parametrize("tier, cpus, mem, failed, left", [
    ("fast", 4, 64 * GIB, None, {"vasp-02": 36}),
    ("reasoning", 8, 200 * GIB, 64 * GIB, {"vasp-01": 32, "vasp-03": 32}),
])
def test_beefcake2s_jobs_ask_what_they_use_and_leave_the_rest(beefcake2, tier, cpus, mem, failed, left):
    t = beefcake2.tier(tier)
    ask = job_ask(beefcake2, t, plan_tier(beefcake2, t))
    assert (ask.cpus, ask.mem, ask.failed, ask.cores_left) == (cpus, mem, failed, left)
    assert ask.mem_ok and ask.planned < ask.mem


def test_the_solver_never_proposes_a_mem_at_or_below_a_measured_failure(beefcake2, tmp_path):
    t = beefcake2.tier("reasoning")
    plan = plan_tier(beefcake2, t)
    assert job_ask(beefcake2, t, plan).planned < 64 * GIB  # the plan alone would ask less than failed
    assert proposed_mem(beefcake2, t, plan) == 200 * GIB  # so the file's own ask, the one measured to work
    assert job_requests(beefcake2, t, plan)["slurm.mem"] == "200G"
    bare = edited_cluster("cluster.yaml", {f"tiers.{REASONING}.slurm.mem_failed": None}, tmp_path)
    t = bare.tier("reasoning")
    assert proposed_mem(bare, t, plan_tier(bare, t)) == job_ask(bare, t, plan_tier(bare, t)).planned


@pytest.mark.parametrize("mem, message", [
    ("64G", "--mem=64G is not above 64G, which was measured to fail"),
    ("32G", "--mem=32G is not above 64G, which was measured to fail"),
    ("65G", None),
])
def test_check_refuses_a_mem_at_or_below_the_measured_failure(tmp_path, mem, message):
    edited_cluster("cluster.yaml", {f"tiers.{REASONING}.slurm.mem": mem}, tmp_path)
    path = str(tmp_path / "edited-cluster.yaml")
    if message is None:
        assert checked_cluster(path).tier("reasoning").slurm.mem == mem
        return
    with pytest.raises(InputError) as refused:
        checked_cluster(path)
    assert any(message in str(p) and "tiers[reasoning].slurm.mem" in str(p) for p in refused.value.problems), \
        refused.value.problems
