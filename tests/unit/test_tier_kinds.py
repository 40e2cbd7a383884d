"""A tier kind is one module (issue 68): clusterbook/pure/kinds/ holds what differs between kinds, and the rest
asks the table or the tier's own schema class; nothing else branches on which kind a tier is."""

import ast
import re
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure import kinds

ROOT = Path(__file__).resolve().parents[2]
KIND_HOME = {ROOT / "clusterbook/pure/kinds", ROOT / "clusterbook/model/tierschema.py"}
TIER_CLASSES = {"RouterTier", "RpcTier", "EmbeddingsTier"}
KIND_NAMES = {"router", "rpc", "embeddings"}


def branches(source: str) -> list[int]:
    """Lines that ask which kind a tier is: isinstance against a tier class, or `.kind` compared with a kind's name
    (`kind` of something else, an artifact's or the cluster's, is not a tier's: its values are not kinds' names)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            if {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & TIER_CLASSES:
                out.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides) and any(
                    isinstance(s, ast.Constant) and s.value in KIND_NAMES for s in sides):
                out.append(node.lineno)
    return out


def outside_kinds() -> dict[str, list[int]]:
    found = {}
    for path in sorted((ROOT / "clusterbook").rglob("*.py")):
        if any(path == home or home in path.parents for home in KIND_HOME) or "node" in path.parent.name:
            continue
        if lines := branches(path.read_text()):
            found[str(path.relative_to(ROOT))] = lines
    for path in sorted((ROOT / "runbooks").rglob("*.yaml")):  # the runbooks' Jinja asks too
        if lines := [i for i, line in enumerate(path.read_text().splitlines(), 1)
                     if re.search(r"\.kind\s*[!=]=\s*['\"](?:%s)['\"]" % "|".join(KIND_NAMES), line)]:
            found[str(path.relative_to(ROOT))] = lines
    return found


def test_nothing_outside_the_kinds_branches_on_a_tiers_kind():
    assert outside_kinds() == {}


@pytest.mark.parametrize("source, count", [
    ("isinstance(t, RpcTier)", 1), ("isinstance(t, (RouterTier, Gpu))", 1), ("t.kind == 'rpc'", 1),
    ("'router' != tier.kind", 1), ("a.kind == 'unit'", 0), ("isinstance(t, Gpu)", 0), ("t.workers", 0),
])
def test_the_count_finds_each_way_of_asking(source, count):
    assert len(branches(source)) == count


def test_every_kind_of_the_schema_has_a_module_in_the_table():
    from typing import get_args

    from clusterbook.model.tierschema import Tier
    schema_kinds = {get_args(cls.model_fields["kind"].annotation)[0] for cls in get_args(get_args(Tier)[0])}
    from clusterbook.model.tierschema import TierKindName
    assert schema_kinds == set(kinds.KINDS) == KIND_NAMES == set(get_args(TierKindName))


@pytest.mark.parametrize("cluster", ["cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"])
def test_every_tier_is_planned_flagged_and_filed_through_its_kind(cluster):
    c = load_cluster(ROOT / cluster)
    for t in c.tiers:
        kind = kinds.of(t)
        assert kind.name == t.kind and kinds.plan_tier(c, t).tier == t.name
        assert kinds.server_argv(c, t)[0].endswith(c.engine.server_binary)
        assert set(kind.http_servers(c, t)) <= {n.name for n in c.nodes}


def test_the_embeddings_kind_serves_vectors_and_plans_no_decoding():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    tier = c.tier("embed")
    argv = kinds.server_argv(c, tier)
    assert "--embeddings" in argv and argv[argv.index("--pooling") + 1] == "mean"
    assert argv[argv.index("--ubatch-size") + 1] == "256" and "--rpc" not in argv and "--models-preset" not in argv
    plan = kinds.plan_tier(c, tier)
    assert plan.decode_bound_tps is None and [d.node for d in plan.devices] == ["lab2"]
    assert kinds.of(tier).request("m") == ("/v1/embeddings", {"model": "m", "input": "Say OK."})
    units = [a for a in kinds.of(tier).files(c, tier, True)]
    assert [a.path for a in units] == ["/etc/systemd/system/llama-embed.service"]


@pytest.mark.parametrize("old, new, want", [
    ("    batch_size: 256\n    ubatch_size: 256\n", "    batch_size: 1024\n    ubatch_size: 1024\n",
     "above a slot's context"),  # a slot holds 512 tokens
    ("    threads: 1\n", "    threads: 1\n    pooling: rank\n", "pooling"),  # a reranker's, not a vector's
    ("    threads: 1\n", "    threads: 1\n    workers: [lab3]\n", "workers"),  # another kind's setting
])
def test_an_embeddings_tier_is_checked_as_its_kind(tmp_path, old, new, want):
    from clusterbook.model.problems import InputError

    text = (ROOT / "lab/cluster.yaml").read_text()
    block = text[text.index("  - name: embed\n"):text.index("\ngateway:")]
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace(block, block.replace(old, new, 1)))
    with pytest.raises(InputError) as err:
        load_cluster(path)
    assert want in str(err.value), str(err.value)


def test_a_tiers_plan_is_made_once_per_cluster_and_tier_and_a_changed_copy_gets_its_own():
    c = load_cluster(ROOT / "cluster.yaml")
    tier = c.tier("reasoning")
    first = kinds.plan_tier(c, tier)
    assert kinds.plan_tier(c, tier) is first  # rendering asks about 11 times
    longer = tier.model_copy(update={"ctx_size": tier.ctx_size // 2})  # the same name, another tier
    assert kinds.plan_tier(c, longer) is not first and kinds.plan_tier(c, longer) == kinds.plan_tier(c, longer)
    assert kinds.plan_tier(c, longer).ctx != first.ctx
    other = c.model_copy(update={"tiers": [longer if t is tier else t for t in c.tiers]})
    assert kinds.plan_tier(other, tier) is not first  # another cluster, the same tier object
    for _ in range(kinds.PLANS_KEPT + 5):  # bounded: the oldest go
        kinds.plan_tier(c, tier.model_copy())
    assert len(kinds._PLANS) <= kinds.PLANS_KEPT
