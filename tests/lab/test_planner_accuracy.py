"""The capacity plan against llama.cpp itself: weights and KV cache within 2 %, compute buffers within 10 %, for a
tier's devices and for a node that holds two tiers at once."""

import pytest

from clusterbook.effects.lab.lab import Lab
from clusterbook.effects.probes import load_report, model_load_report
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import plan_one_node
from clusterbook.pure.planner.residency import plan_residency
from clusterbook.pure.planner.shape import from_gguf

from .conftest import NEEDS_LAB, ROOT, invoke

pytestmark = [pytest.mark.lab, NEEDS_LAB]


@pytest.fixture(scope="module")
def deployed():
    up = invoke("lab.up")
    assert up.returncode == 0, up.stderr
    run = invoke("deploy.install", "models.fetch", "deploy.reasoning", "deploy.fast", "deploy.embed")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr


def assert_report_is_plan(report, plan) -> None:
    """Every device's weights and KV cache within 2 % of the plan, its compute buffers within 10 %."""
    for device in plan.devices:
        name = device.device
        assert report.weights[name] == pytest.approx(device.weights, rel=0.02), f"{name} weights: {report.log}"
        assert report.kv[name] == pytest.approx(device.kv, rel=0.02), f"{name} KV cache: {report.log}"
        assert report.compute[name] == pytest.approx(device.compute, rel=0.10), f"{name} compute: {report.log}"


def test_plan_matches_llama_cpp(deployed, lab_cluster, ssh):
    tier = lab_cluster.tier("reasoning")
    shape = from_gguf(Lab(lab_cluster, ROOT).www / "lab" / "lab-reasoning.gguf")
    plan = plan_tier(lab_cluster, tier, shape)
    report = load_report(ssh, lab_cluster, tier)
    assert report.offloaded == (9, 13), report.log
    assert_report_is_plan(report, plan)
    assert invoke("deploy.reasoning").returncode == 0  # the head is back and healthy


def test_the_embeddings_plan_matches_llama_cpp(deployed, lab_cluster, ssh):
    """Issue 68: the third kind's plan (one node, its physical batch) against llama.cpp's own report of its load."""
    tier = lab_cluster.tier("embed")
    shape = from_gguf(Lab(lab_cluster, ROOT).www / "lab" / lab_cluster.model(tier.model).file)
    plan = plan_tier(lab_cluster, tier, shape)
    assert_report_is_plan(load_report(ssh, lab_cluster, tier), plan)
    assert invoke("deploy.embed").returncode == 0  # the server is back and healthy


def test_a_node_with_two_tiers_matches_the_planned_sum(deployed, lab_cluster, ssh):
    """lab1 holds the reasoning head's CPU share and the fast tier's resident model at once: llama.cpp's own
    reports of both processes against the cluster plan's worst load of lab1's RAM."""
    www = Lab(lab_cluster, ROOT).www / "lab"
    reasoning, fast = lab_cluster.tier("reasoning"), lab_cluster.tier("fast")
    shapes = {m: from_gguf(www / lab_cluster.model(m).file) for m in fast.models}
    plans = {"reasoning": plan_tier(lab_cluster, reasoning, from_gguf(www / "lab-reasoning.gguf")),
             "fast": plan_one_node(lab_cluster, fast, shapes),
             "embed": plan_tier(lab_cluster, lab_cluster.tier("embed"))}
    load = plan_residency(lab_cluster, plans).load("lab1", "RAM")
    assert load.tiers == ["fast", "reasoning"], load
    resident = max(fast.models, key=lambda m: lab_cluster.model(m).bytes)  # models_max 1: the larger one
    reports = [load_report(ssh, lab_cluster, reasoning), model_load_report(ssh, lab_cluster, fast, resident)]
    for part, tolerance in (("weights", 0.02), ("kv", 0.02), ("compute", 0.10)):
        planned = sum(getattr(s, part) for s in load.shares)
        measured = sum(getattr(r, part).get("CPU", 0) for r in reports)
        assert measured == pytest.approx(planned, rel=tolerance), f"lab1 {part}: planned {planned}, measured " \
                                                                   f"{measured} ({[r.log for r in reports]})"
    assert invoke("deploy.reasoning").returncode == 0  # the head is back and healthy
