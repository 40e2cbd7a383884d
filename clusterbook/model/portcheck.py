"""Ports: no two services listen on one port of a node, and a tier never takes a port of a service clusterbook
deploys or knows is there (sshd, SLURM's daemons, Alertmanager's cluster port)."""

from __future__ import annotations

from clusterbook.model.problems import Path
from clusterbook.model.schema import Cluster

Finding = tuple[Path, str]
SSH_PORT = 22
SLURMCTLD_PORT, SLURMD_PORT, SLURMDBD_PORT = 6817, 6818, 6819  # slurm.conf's defaults
ALERTMANAGER_CLUSTER_PORT = 9094  # its gossip port, open by default


Claim = tuple[str, int, str, Path]  # node, port, what listens there, the file's field that says so


def port_claims(c: Cluster) -> list[Claim]:
    """Every port a service holds on a node, in the order they are claimed: the cluster's own daemons first (a tier
    cannot take theirs), then clusterbook's services and the tiers."""
    claims: list[Claim] = []

    def claim(node: str, port: int, what: str, path: Path) -> None:
        claims.append((node, port, what, path))

    for node in c.nodes:  # the ports the cluster's own services hold come first: a tier cannot take them
        claim(node.name, SSH_PORT, "sshd (clusterbook reaches every node through it)", ("nodes",))
    if any(t.manager == "slurm" for t in c.tiers):  # SLURM's own daemons (slurm.conf's defaults)
        for node in c.nodes:
            claim(node.name, SLURMD_PORT, "slurmd", ("nodes",))
        if c.slurm_controller:
            claim(c.slurm_controller, SLURMCTLD_PORT, "slurmctld", ("nodes",))
            claim(c.slurm_controller, SLURMDBD_PORT, "slurmdbd", ("nodes",))
    if c.monitoring:
        claim(c.monitoring.node, ALERTMANAGER_CLUSTER_PORT, "Alertmanager's cluster port", ("monitoring",))
    if c.gateway:
        for j, route in enumerate(c.gateway.routes):
            claim(c.gateway.node, route.port, f"gateway route {route.path}", ("gateway", "routes", j, "port"))
        if c.gateway.path_port:
            claim(c.gateway.node, c.gateway.path_port, "the gateway's path port", ("gateway", "path_port"))
        if c.gateway.docs_port:
            claim(c.gateway.node, c.gateway.docs_port, "the gateway's docs port", ("gateway", "docs_port"))
        claim(c.gateway.node, c.gateway.wake_port, "the gateway's hold and wake service", ("gateway", "wake_port"))
    if c.monitoring:
        m = c.monitoring
        claim(m.node, m.port, "Prometheus", ("monitoring", "port"))
        claim(m.node, m.alertmanager_port, "Alertmanager", ("monitoring", "alertmanager_port"))
        claim(m.node, m.alert_journal_port, "the alert journal", ("monitoring", "alert_journal_port"))
        for node in c.nodes:
            claim(node.name, m.node_exporter_port, "the node exporter", ("monitoring", "node_exporter_port"))
    for i, tier in enumerate(c.tiers):
        for node, port, what, field in tier.listeners():
            claim(node, port, what, ("tiers", i, field))
    return claims


def port_findings(c: Cluster) -> list[Finding]:
    """No two services may listen on the same port of one node."""
    used: dict[tuple[str, int], str] = {}
    out: list[Finding] = []
    for node, port, what, path in port_claims(c):
        if (node, port) in used:
            out.append((path, f"port {port} on {node} is already used by {used[(node, port)]}"))
        else:
            used[(node, port)] = what
    return out
