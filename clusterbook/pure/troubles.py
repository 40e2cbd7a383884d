"""The troubleshooting entries as the site and the alerts show them: an entry the file writes for every tier
(`each_tier`) once per tier (ID-TIER), its commands filled with that tier's unit, job and nodes, so each alert
leads to its own tier's commands."""

from __future__ import annotations

from clusterbook.model.hosts import trouble_tiers
from clusterbook.model.recordschema import Trouble
from clusterbook.model.schema import Cluster


def entries(c: Cluster) -> list[Trouble]:
    """Every entry in the file's order, one written for every tier once per tier."""
    out = []
    for t in c.troubleshooting:
        if not t.each_tier:
            out.append(t)
            continue
        for tier in trouble_tiers(c, t):
            out.append(t.model_copy(update={"id": f"{t.id}-{tier.name}", "tier": tier.name, "each_tier": False,
                                            "symptom": f"{t.symptom} (tier {tier.name})"}))
    return out


def linked(c: Cluster, entry: str, tier: str | None) -> list[str]:
    """The entries an alert links for the file's entry `entry`: an alert of one tier that tier's (an entry of another
    tier: none); an alert of no tier (a node's) every tier's where the entry is written for every tier."""
    written = next((t for t in c.troubleshooting if t.id == entry), None)
    if written is None:
        return [entry]  # not in the file: alert_findings says so
    if written.each_tier:
        shown = [t.name for t in trouble_tiers(c, written)]
        return ([f"{entry}-{tier}"] if tier in shown else []) if tier else [f"{entry}-{name}" for name in shown]
    return [entry] if written.tier in (None, tier) or tier is None else []
