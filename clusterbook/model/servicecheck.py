"""Cross-field rules of what clusterbook's services are told: values that pass their own ranges but would open a
firewall too wide, name the wrong host, do nothing, or rest on a decision no longer in force (issue 65)."""

from __future__ import annotations

import ipaddress

from clusterbook.model.problems import Path
from clusterbook.model.schema import Cluster

Finding = tuple[Path, str]

WIDEST_PREFIX = {4: 16, 6: 48}  # a network's firewall rules admit its whole subnet: a site's, not a provider's


def service_findings(c: Cluster) -> list[Finding]:
    """Every problem of the rules below, as (path, message)."""
    out: list[Finding] = []
    for rule in (_subnets, _kept_weights, _build_patches, _tailscale_name, _listen, _docs_path, _decisions_in_force,
                 _model_ids):
        out.extend(rule(c))
    return out


def _subnets(c: Cluster) -> list[Finding]:
    """The firewall opens a tier's API, the node exporters and the RPC ports to a network's whole subnet."""
    out: list[Finding] = []
    for name, net in c.networks.items():
        subnet = ipaddress.ip_network(net.subnet)
        widest = WIDEST_PREFIX[subnet.version]
        if subnet.prefixlen < widest and not subnet.is_loopback:  # a rehearsal on one machine reaches no one
            out.append((("networks", name, "subnet"),
                        f"{subnet} holds {subnet.num_addresses:,} addresses, and the firewall opens the tiers' ports "
                        f"to all of them: give the subnet the nodes are on (/{widest} or narrower)"))
    return out


def _kept_weights(c: Cluster) -> list[Finding]:
    """keep_weights_s is read only by the engine patch that keeps a head's weights on its workers."""
    if c.engine.patched_for("kept_weights"):
        return []
    return [(("tiers", i, "keep_weights_s"),
             f"{t.keep_weights_s} s has no effect: no patch in engine.patches keeps a head's weights on its workers "
             "(one whose speeds_up names kept_weights); remove it, or add that patch")
            for i, t in enumerate(c.tiers) if getattr(t, "keep_weights_s", 0)]


BUILD_PATCHES = {  # an engine build option -> (the value that needs a patch, the patch's speeds_up, what it does)
    "unity_build": (True, "unity_build", "keeps mtmd and ggml-rpc out of the unity build", "build-unity-apart"),
    "optimize": ("kernels", "optimize_kernels", "gives ggml its own optimization level", "build-ggml-opt-level"),
}


def _build_patches(c: Cluster) -> list[Finding]:
    """A build option of b11434 that works only with a patch of the series: a unity build compiles only with the
    patch that keeps mtmd and ggml-rpc out of it, ggml alone at -O3 only with the one that gives it a level."""
    out: list[Finding] = []
    for field, (value, effect, what, patch) in BUILD_PATCHES.items():
        if getattr(c.engine, field) == value and not c.engine.patched_for(effect):
            out.append((("engine", field), f"{str(value).lower()} needs the patch that {what} (one whose speeds_up "
                        f"names {effect}: patches/{patch}.patch); add it, or leave the option out"))
    return out


def _tailscale_name(c: Cluster) -> list[Finding]:
    """The gateway's Tailscale name is the gateway's: one naming another node sends the site's links there."""
    if not c.gateway or not c.gateway.tailscale_name:
        return []
    machine = c.gateway.tailscale_name.split(".")[0].lower()
    other = next((n for n in c.nodes if n.name != c.gateway.node and machine in {n.name.lower(), n.hostname.lower()}),
                 None)
    if other is None:
        return []
    return [(("gateway", "tailscale_name"), f"{c.gateway.tailscale_name} names node {other.name}, and the gateway "
             f"runs on {c.gateway.node}: give the gateway node's own Tailscale name")]


def _listen(c: Cluster) -> list[Finding]:
    """nginx's `listen ADDRESS:PORT` and the URLs clusterbook writes take IPv4 addresses here."""
    if not c.gateway:
        return []
    return [(("gateway", "listen", j), f"{addr} is an IPv6 address: the gateway listens on IPv4 addresses (nginx "
             "and every URL clusterbook writes would read it wrong)")
            for j, addr in enumerate(c.gateway.listen) if ":" in addr]


def _docs_path(c: Cluster) -> list[Finding]:
    """The published site has /docs/ on the path port: a route there would be a second nginx location."""
    if not c.gateway or not c.gateway.docs_port or not c.gateway.path_port:
        return []
    return [(("gateway", "routes", j, "path"), f"{r.path} is the published site's path on the path port "
             f"({c.gateway.path_port}): route the tier elsewhere")
            for j, r in enumerate(c.gateway.routes) if r.path.startswith("/docs/") or r.path == "/docs"]


def _decisions_in_force(c: Cluster) -> list[Finding]:
    """An exception (no owner yet, alerts routed nowhere) rests on a decision no later decision superseded."""
    superseded = {old: d.id for d in c.decisions for old in d.supersedes}
    out: list[Finding] = []
    unrouted = c.monitoring.alerts_unrouted if c.monitoring else None
    for where, decision in ((("owner_unrecorded",), c.owner_unrecorded), (("monitoring", "alerts_unrouted"), unrouted)):
        if decision in superseded:
            out.append((where, f"decision {decision} was superseded by {superseded[decision]}: name the decision "
                               "in force that accepts this"))
    return out


def _model_ids(c: Cluster) -> list[Finding]:
    """Model ids are the presets file's sections, which an ini reader takes without regard to case."""
    seen: dict[str, str] = {}
    out: list[Finding] = []
    for i, m in enumerate(c.models):
        first = seen.setdefault(m.id.lower(), m.id)
        if first != m.id:
            out.append((("models", i, "id"), f"'{m.id}' differs from '{first}' only in case: the router's presets "
                                             "file would read them as one section"))
    return out
