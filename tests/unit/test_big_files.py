"""A file far larger than any site's is checked in time linear in its size (issue 44): a chain of 20,000 jump
hosts is walked once and refused at its ninth hop; 10,000 claims of one model plan that model once per placement.
The times are benchmarks/big_files.py's; here, the work done."""

import copy
from pathlib import Path

import yaml

from clusterbook.model.crosscheck import MAX_JUMP_CHAIN, check_cluster
from clusterbook.model.problems import Problem
from clusterbook.model.schema import Cluster
from clusterbook.pure.planner import findings
from tests.conftest import whole_text

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load(whole_text())


def test_a_long_jump_chain_is_refused_once_at_the_hop_past_the_limit():
    data = copy.deepcopy(BASE)
    data["access"]["jump_hosts"] = {f"j{i}": {"address": f"10.9.{i // 250}.{i % 250 + 1}",
                                              **({"via": f"j{i - 1}"} if i else {})} for i in range(20_000)}
    data["access"]["jump_hosts"]["loop-a"] = {"address": "10.8.0.1", "via": "loop-b"}
    data["access"]["jump_hosts"]["loop-b"] = {"address": "10.8.0.2", "via": "loop-a"}
    data["access"]["jump_hosts"]["lost"] = {"address": "10.8.0.3", "via": "nowhere"}
    for node in data["nodes"]:
        node.pop("jump", None)
    found = [(p, m) for p, m in check_cluster(Cluster.model_validate(data)) if p[:2] == ("access", "jump_hosts")]
    assert found == [
        (("access", "jump_hosts", f"j{MAX_JUMP_CHAIN}", "via"),
         f"j{MAX_JUMP_CHAIN} is reached through {MAX_JUMP_CHAIN} other jump hosts: at most "
         f"{MAX_JUMP_CHAIN - 1} are allowed"),
        (("access", "jump_hosts", "loop-b", "via"), "jump hosts form a loop through 'loop-a'"),
        (("access", "jump_hosts", "lost", "via"), "unknown jump host 'nowhere'")]


def plans_made(monkeypatch, claims: int) -> int:
    """How many plans plan_findings makes for beefcake2 with D01's first claim written `claims` times."""
    from clusterbook.pure.kinds import plan_cluster
    from clusterbook.pure.planner.residency import plan_residency
    data = copy.deepcopy(BASE)
    data["decisions"][0]["claims"] = [dict(data["decisions"][0]["claims"][0]) for _ in range(claims)]
    c = Cluster.model_validate(data)
    plans = plan_cluster(c)
    planned = []
    real = findings.plan_tier
    monkeypatch.setattr(findings, "plan_tier", lambda *a, **k: planned.append(1) or real(*a, **k))
    out = findings.plan_findings(c, plans, plan_residency(c, plans))
    monkeypatch.undo()
    assert not [p for p, _ in out if p[:1] == ("decisions",)]  # each claim still refuted, none reported
    return len(planned)


def test_claims_of_one_model_plan_it_once(monkeypatch):
    assert plans_made(monkeypatch, 10_000) == plans_made(monkeypatch, 1)


def test_a_message_repeats_at_most_a_few_hundred_characters_of_a_value():
    problem = Problem(("cluster", "description"), "too long (got " + repr("x" * 20_000_000) + ")", 3, "f.yaml")
    assert len(str(problem)) < 1000 and str(problem).endswith("more characters)")
