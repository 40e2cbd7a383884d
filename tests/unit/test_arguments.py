"""A task's --tier, node and --only arguments, checked against the cluster file in one place."""

from pathlib import Path

import pytest

from clusterbook.commands.arguments import node_named, nodes_named, tier_named
from clusterbook.effects.console import Failed
from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parents[2]


def test_known_names_pass_and_unknown_ones_fail_naming_what_there_is():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    assert tier_named(c, "reasoning").name == "reasoning"
    assert node_named(c, "lab2") == "lab2"
    assert nodes_named(c, None) is None
    assert nodes_named(c, "lab1, lab3") == ["lab1", "lab3"]
    with pytest.raises(Failed, match=r"unknown tier 'fats' \(tiers of .*: fast, reasoning, embed\)"):
        tier_named(c, "fats")
    with pytest.raises(Failed, match=r"unknown node 'lab9' \(nodes: lab1, lab2, lab3\)"):
        node_named(c, "lab9")
    with pytest.raises(Failed, match=r"--only: unknown node\(s\) lab7, lab8 "):
        nodes_named(c, "lab1,lab7,lab8")
