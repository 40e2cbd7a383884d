"""Tiers on demand, host-free: what the cluster file's on_demand renders (the gateway's wake service and its nginx
locations, the keeper's release) and that the real validators accept it. The lab test runs it for real."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterbook.effects.validators import TOOLS, validate
from clusterbook.model.loader import load_cluster
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.loadtime import cold_start_at_most_s, cold_start_s, wait_cap_s, whole_s
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.slurmjob import DEMAND_MARKS, MARKS

ROOT = Path(__file__).resolve().parents[2]
SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"
LINE = "    keep_weights_s: 60"  # the reasoning tier's (its last setting)


@pytest.fixture
def on_demand(tmp_path):
    """The SLURM lab with its reasoning tier on demand (as tests/lab/test_slurm.py deploys it)."""
    path = tmp_path / "cluster.yaml"
    path.write_text(SLURM_LAB.read_text().replace(LINE, "    on_demand: {idle_s: 10}\n" + LINE))
    return load_cluster(path)


def files(c) -> dict[str, str]:
    return {a.path: a.text for a in render_artifacts(c) if a.node == c.gateway.node}


def test_the_gateway_asks_the_wake_service_and_proxies_where_it_says(on_demand):
    site = files(on_demand)["/etc/nginx/sites-available/clusterbook.conf"]
    tier = on_demand.tier("reasoning")
    cap, cold = wait_cap_s(on_demand, tier, plan_tier(on_demand, tier)), cold_start_s(on_demand, tier,
                                                                                        plan_tier(on_demand, tier))
    assert site.count("auth_request /_clusterbook_wake_reasoning;") == 2  # its route's port and the path port
    assert site.count("location = /_clusterbook_wake_reasoning {\n        internal;") == 2
    assert f"proxy_read_timeout {cap + 10}s;" in site
    assert f"add_header Retry-After {whole_s(cold)} always;" in site
    assert "rewrite ^/reasoning/(.*)$ /$1 break;" in site  # the path port strips the prefix, as proxy_pass did
    assert "auth_request /_clusterbook_wake_fast" not in site  # fast is not on demand


def test_the_wake_service_and_the_keeper_share_the_tiers_figures(on_demand):
    tier = on_demand.tier("reasoning")
    rendered = files(on_demand)
    config = json.loads(rendered["/etc/clusterbook/wake.json"])
    assert config["tiers"] == {"reasoning": {
        "job": "llama-reasoning", "kind": "rpc", "user": "root",
        "record": "/cluster/shared/ai/endpoints/reasoning.json",
        "cap_s": wait_cap_s(on_demand, tier, plan_tier(on_demand, tier)), "key_file": None,
        "hosts": ["10.214.0.11", "10.214.0.12", "10.214.0.13", "slab1", "slab2", "slab3"],
        "marks": {m: f"/{'var/lib/clusterbook/demand' if m in DEMAND_MARKS else 'etc/llama/slurm'}/llama-reasoning.{m}"
                  for m in MARKS}}}
    keeper = json.loads(rendered["/etc/clusterbook/keeper.json"])
    assert {j["tier"]: j["idle_s"] for j in keeper["jobs"]} == {"fast": None, "reasoning": 10}
    assert keeper["wake_port"] == on_demand.gateway.wake_port
    assert next(j for j in keeper["jobs"] if j["tier"] == "reasoning")["marks"] == config["tiers"]["reasoning"]["marks"]


def test_the_api_page_tells_a_first_request_what_slurm_adds_just_after_a_scheduling_pass(on_demand):
    from clusterbook.pure.docpages import on_demand_note
    tier = on_demand.tier("reasoning")
    plan = plan_tier(on_demand, tier)
    # SLURM starts no batch job within batch_sched_delay (3 s by default) of its last scheduling pass
    assert cold_start_at_most_s(on_demand, tier, plan) == pytest.approx(cold_start_s(on_demand, tier, plan) + 3)
    note = on_demand_note(on_demand, tier, plan)
    assert (f"about {whole_s(cold_start_s(on_demand, tier, plan))} s (the capacity plan's predicted cold start; "
            f"{whole_s(cold_start_at_most_s(on_demand, tier, plan))} s when SLURM has just run a scheduling pass: "
            "it starts no job within 3 s of one)") in note
    assert f"at most {wait_cap_s(on_demand, tier, plan)} s" in note


def test_without_a_tier_on_demand_no_tier_is_woken():
    c = load_cluster(SLURM_LAB)
    rendered = files(c)
    assert json.loads(rendered["/etc/clusterbook/wake.json"])["tiers"] == {}  # the hold service only
    assert "auth_request" not in rendered["/etc/nginx/sites-available/clusterbook.conf"]
    assert not any(j["idle_s"] for j in json.loads(rendered["/etc/clusterbook/keeper.json"])["jobs"])


@pytest.mark.tools
@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="validators not installed")
def test_the_real_validators_accept_what_on_demand_renders(on_demand):
    verdicts = validate(render_artifacts(on_demand))
    failed = [f"{v.node}:{v.path} {v.validator}: {v.output}" for v in verdicts if not v.ok]
    assert not failed, "\n".join(failed)
    checked = {(v.path, v.validator) for v in verdicts}
    assert ("/usr/local/sbin/clusterbook-wake", "python3 -m py_compile") in checked
    assert ("/etc/systemd/system/clusterbook-wake.service", "systemd-analyze verify") in checked
    assert any(v.validator == "nginx -t" for v in verdicts)
