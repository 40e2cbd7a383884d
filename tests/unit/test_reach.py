"""Issue 66 row 1: verify's GPU utilisation and fabric targets come from the plan where the file asks more than the
plan reaches: a layer split of N GPUs keeps each busy about its share of a token, and one RPC connection per worker
carries the load at the planner's rate, not the link's (planner/reach.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.pages.operatepages import targets
from clusterbook.pure.planner import reach

from .edits import edited_cluster

ROOT = Path(__file__).resolve().parents[2]
BEEFCAKE2 = load_cluster(ROOT / "cluster.yaml")


def test_each_gpu_of_a_split_is_busy_its_share_of_a_token_and_a_lone_gpu_all_of_it():
    reasoning = reach.gpu_busy_pct(BEEFCAKE2, BEEFCAKE2.tier("reasoning"))
    assert len(reasoning) == len(BEEFCAKE2.tier("reasoning").nodes)
    assert 95 <= sum(reasoning.values()) < 100  # the rest of a token: the RPC hops
    assert max(reasoning.values()) - min(reasoning.values()) < 5  # the split is even
    assert reach.gpu_busy_pct(BEEFCAKE2, BEEFCAKE2.tier("fast")) == {("vasp-02", 0): 100.0}


@pytest.mark.parametrize("asked, judged_by_file", [(70, False), (30, True)])
def test_verify_judges_by_the_file_unless_it_asks_more_than_the_plan_reaches(tmp_path, asked, judged_by_file):
    c = edited_cluster("cluster.yaml", {"targets.0.gpu_util_pct": {"target": asked, "acceptable": 20,
                                                                    "critical": 10}}, tmp_path)
    tier = c.tier("reasoning")
    for node, index in reach.gpu_busy_pct(c, tier):
        judged = reach.judged_gpu_util(c, tier, node, index)
        planned = reach.gpu_busy_pct(c, tier)[(node, index)]
        assert judged.target == (asked if judged_by_file else pytest.approx(planned * reach.UTIL_MARGIN))
        assert ("the file's" if judged_by_file else "more than the plan reaches") in judged.why
    assert reach.judged_gpu_util(c, c.tier("fast"), "vasp-02", 0) is None  # the file asks nothing of it


@pytest.mark.parametrize("edits, gbps", [
    ({}, 21.6),  # the patched load's 2.7 GB/s on one connection
    ({"engine.patches": [], "tiers.RPC.keep_weights_s": 0}, 3.2),  # b11434's own 0.4 GB/s
    ({"networks.fabric.bandwidth_gbps": 10}, 10),  # the link is the limit
])
def test_the_fabric_target_is_what_one_rpc_stream_carries_in_the_plan(tmp_path, edits, gbps):
    rpc = [t.name for t in BEEFCAKE2.tiers].index("reasoning")
    c = edited_cluster("cluster.yaml", {k.replace("RPC", str(rpc)): v for k, v in edits.items()}, tmp_path)
    judged = reach.judged_fabric(c, c.tier("reasoning"))
    assert judged.target == pytest.approx(gbps) and judged.asked == 50
    assert reach.judged_fabric(c, c.tier("fast")) is None


def test_the_targets_page_says_what_verify_asks_where_the_plan_lowers_it():
    page = targets(BEEFCAKE2)
    fabric = next(line for line in page.splitlines() if "fabric bandwidth" in line)
    assert "≥ 50 Gbit/s — verify asks ≥ 21.6" in fabric
    gpu = next(line for line in page.splitlines() if "reasoning | GPU utilisation" in line)
    assert "verify asks ≥ 39" in gpu
