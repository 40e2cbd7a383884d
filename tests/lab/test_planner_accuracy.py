"""The capacity plan against llama.cpp itself: weights and KV cache within 2 %, compute buffers within 10 %."""

import pytest

from clusterbook.effects.lab.lab import Lab
from clusterbook.effects.probes import load_report
from clusterbook.pure.planner.capacity import plan_tier
from clusterbook.pure.planner.shape import from_gguf

from .conftest import NEEDS_LAB, ROOT, invoke

pytestmark = [pytest.mark.lab, NEEDS_LAB]


@pytest.fixture(scope="module")
def deployed():
    up = invoke("lab.up")
    assert up.returncode == 0, up.stderr
    run = invoke("deploy.install", "models.fetch", "deploy.reasoning")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr


def test_plan_matches_llama_cpp(deployed, lab_cluster, ssh):
    tier = lab_cluster.tier("reasoning")
    shape = from_gguf(Lab(lab_cluster, ROOT).www / "lab" / "lab-reasoning.gguf")
    plan = plan_tier(lab_cluster, tier, shape)
    report = load_report(ssh, lab_cluster, tier)
    assert report.offloaded == (9, 13), report.log
    for device in plan.devices:
        name = device.device
        assert report.weights[name] == pytest.approx(device.weights, rel=0.02), f"{name} weights"
        assert report.kv[name] == pytest.approx(device.kv, rel=0.02), f"{name} KV cache"
        assert report.compute[name] == pytest.approx(device.compute, rel=0.10), f"{name} compute"
    assert invoke("deploy.reasoning").returncode == 0  # the head is back and healthy
