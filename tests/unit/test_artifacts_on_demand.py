"""A runbook's files rendered on demand: every expansion is the one the whole rendered list gives, and a tier's
deploy renders only its tier's group."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.render.artifacts import RenderedOnDemand, artifact_groups, render_artifacts
from clusterbook.pure.runbooks import available, expand

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ["cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"]


@pytest.mark.parametrize("name", CLUSTERS)
def test_each_file_has_one_key(name):
    """What makes a lookup on demand answer as the whole list's index: no (node, tier, id) is rendered twice."""
    keys = [(a.node, a.tier, a.id) for a in render_artifacts(load_cluster(ROOT / name))]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_expansion_on_demand_is_the_one_of_the_whole_list(name):
    c = load_cluster(ROOT / name)
    everything = render_artifacts(c)
    compared = 0
    for book in available().values():
        rb = book.runbook
        tiers = [None] if rb.scope == "cluster" else [t.name for t in c.tiers if t.kind in rb.kinds]
        for tier in tiers:
            assert outcome(book, c, tier, None) == outcome(book, c, tier, everything), (rb.id, tier)
            compared += 1
    assert compared > len(available())


def outcome(book, c, tier, artifacts):
    """The expansion, or the problem a runbook that does not apply to the tier (its manager) reports."""
    try:
        return expand(book, c, tier, artifacts=artifacts)
    except InputError as exc:
        return str(exc)


def test_a_tier_deploy_renders_its_own_group_only():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    files = RenderedOnDemand(c)
    env = files.get(("lab1", "reasoning", "env"))
    assert env is not None and env.path == "/etc/llama/reasoning.env"
    assert len(files.pending) == len(artifact_groups(c)) - 1  # the reasoning tier's group, nothing else
    assert files.get(("lab1", None, "no_such_file")) is None and not files.pending  # a miss looks everywhere
