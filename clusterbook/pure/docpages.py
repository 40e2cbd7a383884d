"""The docs site's generated sections: the cluster model -> Markdown. Pure; every value comes from the cluster."""

from __future__ import annotations

import json
import math

from clusterbook.model.hosts import resolve_hosts
from clusterbook.model.schema import HIGHER_IS_BETTER, Cluster, RouterTier, RpcTier
from clusterbook.model.templating import render_string
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.planner.capacity import GIB, TierPlan, plan_cluster
from clusterbook.pure.planner.findings import evaluate_claim
from clusterbook.pure.planner.loadtime import predict_load, recovery_text
from clusterbook.pure.planner.residency import exclusion_text, plan_residency
from clusterbook.pure.render.artifacts import Artifact, selector_rows
from clusterbook.pure.runbooks import Expansion, PutFile

METRICS = {"decode_tps": ("decode throughput", "tok/s"), "ttft_s": ("time to first token", "s"),
           "gpu_util_pct": ("GPU utilisation", "%"), "gpu_mem_gib": ("memory per GPU", "GiB"),
           "fabric_gbps": ("fabric bandwidth", "Gbit/s"), "recovery_s": ("recovery after a worker crash", "s"),
           "api_response_s": ("API answers within", "s")}


def table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "bash") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"


def gib(n: int | None) -> str:
    if n is None:
        return "–"
    return f"{n / GIB:.2f} GiB" if abs(n) >= 0.1 * GIB else f"{n / 2**20:.1f} MiB"


def tier_summary(c: Cluster) -> str:
    rows = []
    for t in c.tiers:
        nodes = ", ".join(t.nodes)
        what = ", ".join(t.served_models)
        public = topo.gateway_url(c, t.name) or "–"
        rows.append([f"**{t.name}**", t.kind, t.manager, what, nodes, f"`{topo.endpoint_url(c, t)}`", public])
    out = table(["tier", "kind", "run by", "models", "nodes", "endpoint", "through the gateway"], rows)
    for sentence in exclusion_text(plan_residency(c, plan_cluster(c))):
        out += f'\n!!! warning "Not at the same time"\n    {sentence} See the [capacity plan](capacity.md).\n'
    return out


def curl_example(c: Cluster, tier: RouterTier | RpcTier) -> str:
    model = tier.served_models[0]
    url = topo.gateway_url(c, tier.name) or topo.endpoint_url(c, tier)
    auth, key = "", ""
    if tier.api_key:
        source = f"the file {tier.api_key.file}" if tier.api_key.file else f"${tier.api_key.env}"
        key = f"KEY=...  # the tier's API key: {source}\n"
        auth = ' \\\n  -H "Authorization: Bearer $KEY"'
    # a reasoning model writes its chain of thought first: the seeds advise 500 tokens or more
    tokens = 500 if c.model(model).reasoning_content else 100
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": tokens})
    return code(f"{key}curl -s {url}/v1/chat/completions \\\n  -H 'Content-Type: application/json'{auth} \\\n"
                f"  -d '{body}'")


def quick_start(c: Cluster) -> str:
    parts = []
    for t in c.tiers:
        parts.append(f"**{t.name}** — {t.description or t.kind}\n\n{curl_example(c, t)}")
    return "\n".join(parts)


def architecture(c: Cluster) -> str:
    """A Mermaid diagram of nodes, networks and tiers."""
    lines = ["```mermaid", "flowchart TB"]
    if c.gateway:
        lines.append(f'  clients(["clients{" via " + c.gateway.tailscale_name if c.gateway.tailscale_name else ""}"])')
    for name, net in c.networks.items():
        lines.append(f'  net_{_id(name)}{{{{"{name}: {net.subnet} ({net.link}, {net.bandwidth_gbps:g} Gb/s)"}}}}')
    for node in c.nodes:
        gpus = ", ".join(f"{g.count}x {g.model}" for g in node.gpus) or "no GPU"
        roles = []
        for t in c.tiers:
            if isinstance(t, RouterTier) and t.node == node.name:
                roles.append(f"{t.name}: router :{t.port}")
            elif isinstance(t, RpcTier) and t.head == node.name:
                roles.append(f"{t.name}: head :{t.port}")
            elif isinstance(t, RpcTier) and node.name in t.workers:
                roles.append(f"{t.name}: RPC worker :{t.rpc_port}")
        if c.gateway and c.gateway.node == node.name:
            roles.append("gateway: nginx")
        label = "<br/>".join([f"<b>{node.name}</b>", gpus, *roles])
        lines.append(f'  {_id(node.name)}["{label}"]')
        for net, addr in node.addresses.items():
            lines.append(f"  {_id(node.name)} ---|{addr}| net_{_id(net)}")
    for t in c.tiers:
        if isinstance(t, RpcTier):
            for w in t.workers:
                lines.append(f"  {_id(t.head)} -. \"{t.name} RPC\" .-> {_id(w)}")
    if c.gateway:
        lines.append(f"  clients --> {_id(c.gateway.node)}")
        for r in c.gateway.routes:
            lines.append(f'  {_id(c.gateway.node)} -- "{r.path}" --> {_id(c.tier(r.tier).nodes[0])}')
    lines.append("```")
    return "\n".join(lines) + "\n"


def _id(name: str) -> str:
    return "n_" + "".join(ch if ch.isalnum() else "_" for ch in name)


def hardware(c: Cluster) -> str:
    rows = []
    for n in c.nodes:
        gpus = "<br>".join(f"{g.count} × {g.model} ({g.memory_mib / 1024:g} GiB, CC {g.compute_capability}, "
                           f"{g.bandwidth_gbs:g} GB/s{', NUMA ' + str(g.numa_node) if g.numa_node is not None else ''})"
                           for g in n.gpus) or "–"
        route = topo.ssh_route(c, n.name)
        rows.append([f"**{n.name}**", n.hostname, ", ".join(n.roles) or "–", gpus, n.cpu_cores, f"{n.ram_gb:g} GB",
                     f"`{route.command()}`"])
    nets = [[f"**{name}**", net.role, net.link, f"`{net.subnet}`", net.mtu, f"{net.bandwidth_gbps:g} Gb/s",
             "yes" if name == c.rpc_network else "no"] for name, net in c.networks.items()]
    addrs = [[n.name] + [f"`{n.addresses.get(net, '–')}`" for net in c.networks] for n in c.nodes]
    jumps = [[name, j.address, j.user or c.access.user, j.port, j.via or "–", j.description]
             for name, j in c.access.jump_hosts.items()]
    out = "## Nodes\n\n" + table(["node", "host name", "roles", "GPUs", "CPU cores", "RAM", "SSH"], rows)
    out += "\n## Networks\n\n" + table(["network", "role", "link", "subnet", "MTU", "bandwidth", "carries RPC"], nets)
    out += "\n## Addresses\n\n" + table(["node", *c.networks], addrs)
    if jumps:
        out += "\n## Jump hosts\n\n" + table(["name", "address", "user", "port", "via", "what"], jumps)
    return out


def models(c: Cluster) -> str:
    rows = []
    for m in c.models:
        where = [t.name for t in c.tiers if m.id in t.served_models]
        a = m.architecture
        size = f"{m.size_bytes:,} B ({gb(m.size_bytes)})" if m.size_bytes else f"≈ {m.approx_size_gb:g} GB"
        source = (f"[{m.source.repo}]({m.source.urls[0]})" + (f" ({len(m.source.files)} parts)"
                                                              if len(m.source.files) > 1 else "")) if m.source else "–"
        rows.append([f"**{m.id}**", f"`{m.file}`", m.quantization, size, f"{a.layers} / {a.heads} / {a.kv_heads}",
                     f"{a.context:,}", "yes" if m.reasoning_content else "no", ", ".join(where) or "not deployed",
                     source])
    return table(["model", "file", "quant", "size", "layers / heads / KV heads", "trained context",
                  "reasoning_content", "served by", "source"], rows)


def tier_flags(c: Cluster) -> str:
    out = []
    for t in c.tiers:
        out.append(f"## {t.name}\n\n{t.description}\n")
        out.append(f"**llama-server** on {t.nodes[0]} (`{fl.binary(c, c.engine.server_binary)}`):\n")
        out.append(table(["flag", "value", "what it does", "why this value"],
                         [[f"`{f.flag}`", f"`{f.value}`" if f.value is not None else "", f.what, f.why]
                          for f in fl.server_flags(c, t)]))
        if isinstance(t, RpcTier):
            w = t.workers[0]
            out.append(f"\n**RPC worker** on {', '.join(t.workers)} (`{fl.binary(c, c.engine.rpc_worker_binary)}`, "
                       f"shown for {w}):\n")
            out.append(table(["flag", "value", "what it does", "why this value"],
                             [[f"`{f.flag}`", f"`{f.value}`", f.what, f.why] for f in fl.worker_flags(c, t, w)]))
            out.append("\n**Layers per device** (llama.cpp's layer split):\n")
            out.append(table(["device", "node", "share", "blocks", "output layer"],
                             [[d.name, d.node, f"{d.share:g}", n, "yes" if o else ""]
                              for d, n, o in topo.layers_per_device(c, t)]))
    return "\n".join(out)


def capacity(c: Cluster, plans: dict[str, TierPlan] | None = None) -> str:
    plans = plans or plan_cluster(c)
    out = []
    for name, p in plans.items():
        out.append(f"## {name}: {p.model} at {p.ctx:,} tokens\n")
        out.append(table(["device", "node", "blocks", "weights", "KV cache", "compute", "overhead", "total", "usable",
                          "headroom"],
                         [[d.device, d.node, f"{d.blocks}{' + output' if d.output else ''}", gib(d.weights), gib(d.kv),
                           gib(d.compute), gib(d.overhead), gib(d.total), gib(d.capacity), gib(d.headroom)]
                          for d in p.devices]))
        facts = [f"Fits: **{'yes' if p.fits else 'no'}**."]
        if p.max_ctx is not None:
            facts.append(f"Largest context that fits: **{p.max_ctx:,}** tokens.")
        if p.decode_bound_tps:
            full = f" ({p.decode_bound_full_ctx_tps:.1f} with a full context)" if p.decode_bound_full_ctx_tps else ""
            facts.append(f"Decode bound: **{p.decode_bound_tps:.1f} tok/s**{full}, one stream.")
        if p.prompt_estimate_tps:
            facts.append(f"Prompt processing estimate: {p.prompt_estimate_tps:,.0f} tok/s.")
        facts += p.notes
        if c.tier(name).kind == "rpc":
            facts.append(recovery_text(c, c.tier(name), p))
        out.append("\n" + " ".join(facts) + "\n")
    out.append(whole_cluster(c, plans))
    out.append("## Seed claims, computed\n")
    rows = []
    for d in c.decisions:
        for claim in d.claims:
            v = evaluate_claim(c, claim, plans)
            computed = "–" if v.computed is None else f"{v.computed:,.1f} {v.unit}"
            rows.append([claim.source, claim.what, f"{claim.claimed:,g} {v.unit}", computed,
                         "impossible" if v.refuted else "possible", f"[{d.id}](decisions.md#{d.id.lower()})"])
    out.append(table(["source", "claim", "claimed", "computed", "verdict", "decision"], rows) if rows else "None.\n")
    return "\n".join(out)


def whole_cluster(c: Cluster, plans: dict[str, TierPlan]) -> str:
    """What runs at the same time, each node's picture, and the worst load of every device."""
    cplan = plan_residency(c, plans)
    out = ["## The whole cluster\n"]
    for sentence in exclusion_text(cplan):
        out.append(f'!!! warning "Tiers that exclude each other"\n    {sentence}\n')
    names = [t.name for t in c.tiers]
    rows = [[a] + ["–" if a == b else ("yes" if any({a, b} <= set(g) for g in cplan.groups) else "**no**")
                   for b in names] for a in names]
    out.append("Which tiers can run at the same time (systemd tiers always do; SLURM decides for its jobs "
               "from their GPU and memory requests):\n")
    out.append(table(["tier", *names], rows))
    for node in dict.fromkeys(x.slot.node for x in cplan.loads):
        out.append(f"\n### {node}\n\n![What {node} holds at once](capacity-{node}.svg)\n")
        out.append(table(["device", "resident at once", "total", "usable", "headroom"],
                         [[x.slot.device + (f" ({x.slot.model})" if x.slot.model else ""),
                           "<br>".join(f"{s.tier} ({s.what}): {gib(s.total)}" for s in x.shares),
                           gib(x.total), gib(x.slot.capacity), gib(x.headroom)]
                          for x in cplan.loads if x.slot.node == node]))
    return "\n".join(out) + "\n"


def router(c: Cluster) -> str:
    if not c.router:
        return "This cluster has no model router.\n"
    rows = [[f"`{r['task']}`", r["model"], r["tier"], f"`{r['endpoint']}`"] for r in selector_rows(c)]
    default = c.router.default_model or "none: unknown tasks exit with status 2"
    why = [[", ".join(f"`{t}`" for t in rule.tasks), rule.model, rule.why] for rule in c.router.rules]
    return (table(["task", "model", "tier", "endpoint"], rows) + f"\nDefault model: **{default}**.\n\n"
            + "### Why\n\n" + table(["tasks", "model", "reason"], why))


def fix_commands(c: Cluster, trouble) -> str:
    tier = c.tier(trouble.tier) if trouble.tier else None
    lines = []
    for step in trouble.fix:
        hosts = resolve_hosts(c, step.hosts)
        for host in hosts or [None]:
            ctx = {"cluster": c, "tier": tier, "node": c.node(host) if host else None, "engine": c.engine,
                   "units": topo.units(tier) if tier else None,
                   "rpc_addresses": [e.split(":")[0] for e in topo.rpc_endpoints(c, tier)]
                   if isinstance(tier, RpcTier) else []}
            command = render_string(step.run, **ctx)
            lines.append(topo.ssh_route(c, host).command(command) if host else command)
    return code("\n".join(lines))


def troubleshooting(c: Cluster) -> str:
    out = []
    for t in c.troubleshooting:
        out.append(f"## {t.symptom}\n\n**Cause.** {t.cause}\n\n**Fix.**\n\n{fix_commands(c, t)}")
    return "\n".join(out) or "No entries.\n"


def decisions(c: Cluster, plans: dict[str, TierPlan] | None = None) -> str:
    out = []
    for d in c.decisions:
        out.append(f"## {d.id} {{ #{d.id.lower()} }}\n\n### {d.title}\n\n*{d.date}"
                   + (f" · sources: {', '.join(d.sources)}" if d.sources else "") + "*\n")
        out.append(f"**Context.** {d.context}\n\n**Decision.** {d.decision}\n\n**Consequences.** {d.consequences}\n")
        for claim in d.claims:
            v = evaluate_claim(c, claim, plans or {})
            if v.computed is not None:
                out.append(f"> {claim.source} claimed {claim.claimed:,g} {v.unit} for {claim.what}; computed: "
                           f"**{v.computed:,.1f} {v.unit}** ({'impossible' if v.refuted else 'possible'}).\n")
    return "\n".join(out) or "No decisions recorded.\n"


def targets(c: Cluster) -> str:
    rows = []
    for t in c.targets:
        for metric, (label, unit) in METRICS.items():
            level = getattr(t, metric)
            if level is None:
                continue
            cmp = "≥" if metric in HIGHER_IS_BETTER else "≤"
            bad = "<" if metric in HIGHER_IS_BETTER else ">"
            rows.append([t.tier, label, f"{cmp} {level.target:g} {unit}", f"{cmp} {level.acceptable:g} {unit}",
                         f"{bad} {level.critical:g} {unit}"])
    return table(["tier", "metric", "target", "acceptable", "critical"], rows) if rows else "No targets.\n"


def api(c: Cluster) -> str:
    out = []
    plans = plan_cluster(c)
    for t in c.tiers:
        base = topo.gateway_url(c, t.name) or topo.endpoint_url(c, t)
        out.append(f"### {t.name}\n")
        rows = [["`POST`", f"`{base}/v1/chat/completions`", "OpenAI-compatible chat completion"],
                ["`GET`", f"`{base}/v1/models`", "models this tier serves" + (" (and their load state)"
                                                                              if isinstance(t, RouterTier) else "")],
                ["`GET`", f"`{base}/health`", "200 when ready, 503 while loading; never needs the API key"]]
        if isinstance(t, RpcTier):
            rows.append(["`GET`", f"`{base}/metrics`", "Prometheus metrics (`--metrics` is on)"])
        out.append(table(["method", "URL", "what"], rows))
        if t.api_key:
            out.append("\nRequests need `Authorization: Bearer <key>`; without it the tier answers 401.\n")
        models_ = t.served_models
        reasoning = [m for m in models_ if c.model(m).reasoning_content]
        if reasoning:
            out.append(f"\n{', '.join(reasoning)} returns its chain of thought in `choices[0].message."
                       "reasoning_content` and the answer in `content`; give `max_tokens` room for both.\n")
        if isinstance(t, RpcTier) or t.manager == "slurm":
            load = predict_load(c, t, plans[t.name])
            cause = "a worker crash or a preemption" if t.manager == "slurm" else "a worker crash"
            seconds = max(1, math.ceil(load.recovery_s))
            routed = c.gateway and any(r.tier == t.name for r in c.gateway.routes)
            got = (f"new ones get `503` with `Retry-After: {seconds}` and a JSON `unavailable_error` from the "
                   "gateway" if routed else "new ones are refused, or get `503` \"Loading model\" while it loads")
            out.append(f'\n!!! note "During a recovery"\n    After {cause} the tier is gone for about '
                       f"{seconds} s (the capacity plan's prediction): requests in flight end without an answer (a "
                       f"stream stops without an error event), {got}. Retry with a backoff for that long (the "
                       "`openai` client retries a 503 only twice by default: raise its `max_retries`); `/health` "
                       "answers 200 again when the tier is back.\n")
    return "\n".join(out)


def files_index(artifacts: list[Artifact]) -> str:
    rows = [[a.node, f"[`{a.path}`](files/{a.node}{a.path})", a.about] for a in artifacts]
    return table(["node", "file (download)", "what"], rows)


def files_verbatim(artifacts: list[Artifact]) -> str:
    out = []
    lang = {"unit": "ini", "env": "bash", "script": "bash", "nginx": "nginx", "nftables": "text", "ini": "ini"}
    for a in artifacts:
        out.append(f"### {a.node}: `{a.path}`\n\n{a.about} · [download](files/{a.node}{a.path})\n\n"
                   f"{code(a.text, lang.get(a.kind, 'text'))}")
    return "\n".join(out)


def runbook_page(expansion: Expansion) -> str:
    """The same expansion `--dry` prints: every step, every host, the exact commands and files."""
    out = [f"# {expansion.title}\n", expansion.explain + "\n"]
    for i, step in enumerate(expansion.steps, 1):
        out.append(f"## {i}. {step.title}\n")
        if step.explain:
            out.append(step.explain + "\n")
        for host, actions in step.hosts.items():
            lines = []
            for a in actions:
                if isinstance(a, PutFile):
                    lines.append(f"# {a.describe()}")
                else:
                    if a.unless:
                        lines.append(f"# skipped when this succeeds: {a.unless}")
                    if a.until:
                        lines.append(f"# repeated until the output has {a.until!r} ({a.retries + 1} tries, "
                                     f"{a.delay:g} s apart)")
                    lines.append(a.command)
            for name, command in step.handlers.get(host, {}).items():
                lines.append(f"# handler {name}, when a file above changed:\n{command}")
            out.append(f"**{host}**\n\n{code(chr(10).join(lines))}")
    return "\n".join(out)


def slug(runbook_id: str, tier: str | None) -> str:
    return f"{runbook_id}-{tier}" if tier else runbook_id
