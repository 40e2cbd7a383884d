"""Which nodes a host selector names (runbook steps, troubleshooting fixes), and the nodes that may run a tier
or get the model selector: derived facts of the cluster, defined once here."""

from __future__ import annotations

from clusterbook.model.schema import Cluster, Tier

TIER_SELECTOR = "tier."  # a troubleshooting step's hosts `tier.nodes`, `tier.head`, `tier.workers`: its entry's tier's


def trouble_tiers(c: Cluster, trouble) -> list:
    """The tiers a troubleshooting entry written for every tier is shown for: all, or those of the manager it names."""
    return [t for t in c.tiers if trouble.each_tier is True or t.manager == trouble.each_tier]


def trouble_hosts(selector: str, tier: str | None) -> str:
    """A fix step's host selector with `tier.` made the entry's tier's (`tier.nodes` -> `reasoning.nodes`)."""
    if tier and selector.startswith(TIER_SELECTOR):
        return tier + "." + selector[len(TIER_SELECTOR):]
    return selector


def candidate_nodes(c: Cluster, tier: Tier) -> list[str]:
    """Nodes that may run the tier: its own nodes, or for a router tier under SLURM every node of its partition."""
    if tier.floats and tier.manager == "slurm" and c.slurm and tier.slurm:
        part = next((p for p in c.slurm.partitions if p.name == tier.slurm.partition), None)
        if part:
            return list(part.nodes)
    return tier.nodes


def router_nodes(c: Cluster) -> list[str]:
    """Nodes that get the model selector: router.node, else the head of every tier."""
    if not c.router:
        return []
    if c.router.node:
        return [c.router.node]
    return sorted({t.nodes[0] for t in c.tiers})


def resolve_hosts(c: Cluster, selector: str) -> list[str]:
    """Node names for a selector: local, all, tiers, gpus, monitoring, a node, a role, gateway, or TIER.head /
    .workers / .nodes; `SELECTOR@debian` or `@el` keeps the nodes of that operating system family."""
    base, at, family = selector.partition("@")
    if at:
        if family not in ("debian", "el"):
            raise ValueError(f"unknown operating system family '{family}' in '{selector}': use @debian or @el")
        return [n for n in resolve_hosts(c, base) if c.node(n).os.family == family]
    if selector == "local":
        return []
    names = [n.name for n in c.nodes]
    if selector in names:
        return [selector]
    if selector in ("compute", "gateway", "controller"):
        if selector == "gateway" and c.gateway:
            return [c.gateway.node]
        if selector == "controller" and c.slurm_controller:  # where sbatch runs: the slurm section's, else the role's
            return [c.slurm_controller]
        return [n.name for n in c.nodes if selector in n.roles]
    if selector == "all":
        return names
    if selector == "slurm":  # the controller and every partition node of a clusterbook-managed SLURM
        if not c.slurm:
            return []
        used = {c.slurm.controller} | {n for p in c.slurm.partitions for n in p.nodes}
        return [n for n in names if n in used]
    if selector == "monitoring":  # the node running Prometheus
        return [c.monitoring.node] if c.monitoring else []
    if selector == "gpus":  # every node with a GPU
        return [n.name for n in c.nodes if n.gpus]
    if selector == "router":  # nodes that get the model selector script
        return router_nodes(c)
    if selector in ("legacy.units", "legacy.files"):  # the nodes holding a unit or file of the earlier setup
        held = set() if not c.legacy else {n for u in c.legacy.units for n in u.nodes} \
            if selector == "legacy.units" else {f.node for f in c.legacy.files}
        return [n for n in names if n in held]
    if selector == "tiers":  # every node that runs (or may run) a tier, in node order
        used = {n for t in c.tiers for n in candidate_nodes(c, t)}
        return [n for n in names if n in used]
    tier_name, _, part = selector.partition(".")
    tiers = {t.name: t for t in c.tiers}
    if tier_name in tiers and part in ("head", "workers", "nodes", "", "candidates"):
        tier = tiers[tier_name]
        members = tier.nodes
        return {"head": members[:1], "workers": members[1:], "nodes": members, "": members,
                "candidates": candidate_nodes(c, tier)}[part]
    raise ValueError(f"unknown host selector '{selector}': use local, all, a node ({', '.join(names)}), "
                     "a role (compute, gateway, controller) or TIER.head / TIER.workers / TIER.nodes")


def build_node(c) -> str:
    """The node that builds llama.cpp: engine.build_node, else the first tier node with a GPU, else the first tier
    node."""
    if c.engine.build_node:
        return c.engine.build_node
    nodes = resolve_hosts(c, "tiers")
    with_gpu = [n for n in nodes if c.node(n).gpus]
    return (with_gpu or nodes)[0]
