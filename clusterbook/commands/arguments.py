"""What a task's arguments name, checked against the cluster file: a tier (--tier), a node, nodes (--only)."""

from __future__ import annotations

from clusterbook.effects.console import Failed
from clusterbook.model.schema import Cluster, Tier


def tier_named(cluster: Cluster, name: str) -> Tier:
    """The tier a --tier names; an unknown name fails with the tiers there are."""
    if name not in {t.name for t in cluster.tiers}:
        raise Failed(f"unknown tier '{name}' (tiers of {cluster.cluster.name}: "
                     f"{', '.join(t.name for t in cluster.tiers)})")
    return cluster.tier(name)


def node_named(cluster: Cluster, name: str) -> str:
    if name not in {n.name for n in cluster.nodes}:
        raise Failed(f"unknown node '{name}' (nodes: {', '.join(n.name for n in cluster.nodes)})")
    return name


def nodes_named(cluster: Cluster, only: str | None) -> list[str] | None:
    """The nodes an --only NODE[,NODE] names (None: every node); unknown names fail, all of them named."""
    if not only:
        return None
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in {x.name for x in cluster.nodes}]
    if unknown:
        raise Failed(f"--only: unknown node(s) {', '.join(unknown)} "
                     f"(nodes: {', '.join(n.name for n in cluster.nodes)})")
    return names
