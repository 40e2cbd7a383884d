"""The architecture, hardware, tiers and capacity pages: what runs where, and what the plan says."""

from __future__ import annotations

from clusterbook.model.schema import FLASH_ATTN_MIN_CC, FLASH_ATTN_PROVEN_CC, Cluster, RpcTier, Tier
from clusterbook.pure import flags as fl
from clusterbook.pure import kinds
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_cluster, plan_tier
from clusterbook.pure.mdtext import mermaid_text, prose_inline, text, title
from clusterbook.pure.pages.apipage import on_demand_note
from clusterbook.pure.pages.markdown import gb, gib, picture, slot_context, table
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.findings import evaluate_claim
from clusterbook.pure.planner.jobask import job_ask
from clusterbook.pure.planner.loadtime import (
    new_job_hold_s,
    predict_load,
    recovery_text,
    whole_s,
)
from clusterbook.pure.planner.prompt import prompt_estimate
from clusterbook.pure.planner.residency import exclusion_text, plan_residency
from clusterbook.pure.planner.variants import variants
from clusterbook.pure.rehearsed import UNITS, WHAT, compared
from clusterbook.pure.render.artifacts import selector_rows
from clusterbook.pure.slurmjob import job_nice


def architecture(c: Cluster) -> str:
    """A Mermaid diagram of every node (its GPUs, addresses and what runs there: tiers, gateway, hold service,
    tailscale serve, Prometheus, SLURM's controller and keeper), the endpoint registry, the request paths (clients to
    the gateway, each route to its tier) and the RPC links; drawn at its own size (its text readable) in one column
    (invisible links put each box below the one before), so a phone shows it whole."""
    # small paddings: with the routes' arrows beside the boxes the column still fits a phone
    lines = ["```mermaid", '%%{init: {"flowchart": {"useMaxWidth": false, "diagramPadding": 2, "padding": 6}}}%%',
             "flowchart TB"]
    order: list[str] = []
    if c.gateway:
        via = f"<br/>{c.gateway.tailscale_name}" if c.gateway.tailscale_name else ""
        lines.append(f'  clients(["clients{via}"])')
        order.append("clients")
    first = [c.gateway.node] if c.gateway else []
    by_tier = [n for t in c.tiers for n in t.nodes]
    for name in dict.fromkeys([*first, *by_tier, *(n.name for n in c.nodes)]):
        node = next(n for n in c.nodes if n.name == name)
        gpus = ", ".join(f"{g.count}x {mermaid_text(g.model)}" for g in node.gpus)
        addresses = [f"{net} {addr}" for net, addr in node.addresses.items()]
        lines.append(f'  {_id(name)}["' + "<br/>".join([f"<b>{name}</b>", *([gpus] if gpus else []), *addresses,
                                                         *_runs_on(c, name)]) + '"]')
        order.append(_id(name))
    if c.slurm_tiers:
        lines.append(f'  registry[("endpoint registry<br/>{mermaid_text(c.storage.endpoint_dir)}")]')
        order.append("registry")
    lines.append("  " + " ~~~ ".join(order))  # one column: each box below the one before
    for t in c.tiers:
        if t.workers:
            lines += [f'  {_id(t.head)} -. "{t.name} RPC, {c.rpc_network}" .-> {_id(w)}' for w in t.workers]
    if c.gateway:  # the request paths: clients to the gateway, each route to its tier's server
        lines.append(f"  clients --> {_id(c.gateway.node)}")
        for r in c.gateway.routes:
            t = c.tier(r.tier)
            lines.append(f"  {_id(c.gateway.node)} --> {_id(t.nodes[0])}")  # unlabelled: the column stays narrow
    lines.append("```")
    nets = "; ".join(f"**{name}** {net.subnet} ({net.link}, {net.bandwidth_gbps:g} Gb/s)"
                     for name, net in c.networks.items())
    slurm = (" A SLURM tier's job runs where SLURM places it and writes its address to the endpoint registry, "
             "which the gateway reads." if c.slurm_tiers else "")
    return "\n".join(lines) + f"\n\nNetworks: {nets}.{slurm}\n"


def _runs_on(c: Cluster, node: str) -> list[str]:
    """What runs on a node, one line each: its tiers' servers and workers, the gateway, monitoring, SLURM's parts."""
    out = []
    for t in c.tiers:
        where = "SLURM job" if t.manager == "slurm" else "systemd"
        path = next((f", the gateway's {r.path}" for r in (c.gateway.routes if c.gateway else []) if r.tier == t.name),
                    "")
        if t.head == node:
            out.append(f"{t.name}: {kinds.of(t).server_word} :{t.port} ({where}{path})")
        elif node in t.workers:
            out.append(f"{t.name}: RPC worker :{t.rpc_port}")
    if c.gateway and c.gateway.node == node:
        out.append("gateway: nginx" + (", tailscale serve" if c.gateway.tailscale_name else ""))
        out.append(f"hold and wake service :{c.gateway.wake_port}")
    if c.monitoring and c.monitoring.node == node:
        out.append(f"Prometheus :{c.monitoring.port}, Alertmanager")
    if c.slurm_tiers and c.slurm_controller == node:
        out.append("SLURM controller" + (", keeper" if c.keeper_node == node else ""))
    elif c.slurm_tiers and c.keeper_node == node:
        out.append("keeper")
    return out


def _id(name: str) -> str:
    return "n_" + "".join(ch if ch.isalnum() else "_" for ch in name)


def hardware(c: Cluster) -> str:
    rows = []
    for n in c.nodes:
        gpus = "<br>".join(f"{g.count} × {text(g.model)} ({g.memory_mib / 1024:g} GiB, CC {g.compute_capability}, "
                           f"{g.bandwidth_gbs:g} GB/s{', NUMA ' + str(g.numa_node) if g.numa_node is not None else ''})"
                           for g in n.gpus) or "–"
        route = topo.ssh_route(c, n.name)
        rows.append([f"**{n.name}**", f"`{route.command()}`", n.hostname, ", ".join(n.roles) or "–", gpus,
                     n.cpu_cores, f"{n.ram_gb:g} GB"])  # the key column second: a phone shows it unscrolled
    nets = [[f"**{name}**", net.role, net.link, f"`{net.subnet}`", net.mtu, f"{net.bandwidth_gbps:g} Gb/s",
             "yes" if name == c.rpc_network else "no"] for name, net in c.networks.items()]
    addrs = [[n.name] + [f"`{n.addresses.get(net, '–')}`" for net in c.networks] for n in c.nodes]
    jumps = [[name, j.address, j.user or c.access.user, j.port, j.via or "–", text(j.description)]
             for name, j in c.access.jump_hosts.items()]
    systems = [[f"**{n.name}**", f"{n.os.id} {n.os.version} ({n.os.family})"
                + ("" if "os" in n.model_fields_set else " (assumed: the file does not say)"),  # as the guide says
                f"gcc-toolset-{n.os.gcc_toolset}" if n.os.gcc_toolset else "the system's",
                n.nvidia_driver or "–", text(n.cpu_model) if n.cpu_model else "–", text(n.nic) if n.nic else "–"]
               for n in c.nodes]
    out = "## Nodes\n\n" + table(["node", "SSH", "host name", "roles", "GPUs", "CPU cores", "RAM"], rows)
    out += ("\n## Operating systems and drivers\n\n" + table(["node", "operating system", "compilers for the build",
                                                              "NVIDIA driver", "CPU", "fast network adapter"],
                                                             systems)
            + "\n`invoke preflight` compares each node's `/etc/os-release` and driver with these. Packages come from "
              "each node's own family: apt on Debian; dnf with EPEL and PowerTools on EL, where the build uses the "
              "gcc-toolset named here (and nvcc uses its g++ as host compiler). Where firewalld runs (EL), each port "
              "clusterbook serves on is opened in the zone of its network's interface, to its peers only: an RPC "
              "worker's port to its tier's nodes, a tier's API to its listen network, the node exporter to the "
              "monitoring node. EL nodes run EPEL's node exporter under clusterbook's own unit. An EL monitoring "
              "node runs Prometheus and Alertmanager from the release tarballs `monitoring.el_releases` pins by "
              "sha256 (no EL package has them); an EL gateway's nginx reads its site from `conf.d`, and SELinux is "
              "told to let it listen on the gateway's ports and proxy to the tiers. The EL path is "
              "rehearsed statically "
              "(shellcheck of every command, fixtures with a Rocky 8.10 node's facts, `--dry`), not run: no Rocky "
              "packages are reachable from where clusterbook is developed.\n")
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


def preemption(c: Cluster) -> str:
    """Who preempts whom on the site's SLURM, and what each partition runs."""
    site = c.slurm_site
    if not site or not (site.qos or site.partitions):
        return ""
    out = ["## Preemption\n"]
    if site.qos:
        out.append(table(["QoS", "priority", "preempts", "used by"],
                         [[f"`{q.name}`", q.priority, ", ".join(f"`{p}`" for p in q.preempts) or "–", text(q.used_by)]
                          for q in sorted(site.qos, key=lambda q: -q.priority)]))
    if site.partitions:
        out.append("\n" + table(["partition", "runs", "tiers may run here"],
                                 [[f"`{p}`", text(what), "yes" if p in site.tier_partitions else "no"]
                                  for p, what in site.partitions.items()]))
    nice = [(t.name, job_nice(t)) for t in c.tiers if t.manager == "slurm" and job_nice(t)]
    if nice:
        out.append("\nA tier's job asks for a lower priority the more nodes it needs ("
                   + ", ".join(f"{name}: `--nice={n}`" for name, n in nice) + "): SLURM's main pass stops at the "
                   "first job of a partition that cannot start, so after a preemption a tier waiting for a taken node "
                   "would hold back one that could start elsewhere until the backfill pass.")
    out.append(job_asks(c))
    return "\n".join(out) + "\n"


def job_asks(c: Cluster) -> str:
    """What each SLURM tier's job asks of each node, why, and the cores it leaves to the site's other jobs."""
    rows = []
    for t in c.slurm_tiers:
        ask = job_ask(c, t, plan_tier(c, t))
        left = ", ".join(f"{text(n)}: {k}" for n, k in ask.cores_left.items())
        rows.append([text(t.name), f"`--cpus-per-task={ask.cpus}`", text(ask.cpus_basis(t)),
                     f"`--mem={t.slurm.mem}`", text(ask.mem_basis()), left or "–"])
    if not rows:
        return ""
    return ("\n### What the jobs ask of each node\n\nA tier's job asks only what it uses, so the site's other jobs "
            "keep the rest of the node (every layer is on the GPUs: D37 has the measurement).\n\n"
            + table(["tier", "CPUs", "because", "memory", "because", "cores left to other jobs"], rows))


def firewall_of(c: Cluster, nodes: list[str]) -> str:
    """What guards the RPC port on these nodes, by their OS family (issue 67: the page said nftables on EL workers)."""
    families = {c.node(n).os.family for n in nodes}
    names = {"debian": "nftables rules", "el": "firewalld rich rules"}
    return " or ".join(names.get(f, "firewall rules") for f in sorted(families))


def tier_notes(c: Cluster, t: Tier, plan: TierPlan) -> list[str]:
    """The warnings that matter for a tier, as admonitions, from its hardware, kind and manager."""
    notes = []
    volta = sorted({(g.model, g.compute_capability) for n in t.nodes for g in c.node(n).gpus
                    if FLASH_ATTN_MIN_CC <= g.cc < FLASH_ATTN_PROVEN_CC})
    if volta and t.workers:  # the RPC tier's flash attention
        names = ", ".join(f"{title(m)} (compute capability {cc})" for m, cc in volta)
        offer = plan.flash
        reach = (f" With it and a {offer.cache_type_k} K and V cache the plan fits **{offer.ctx:,}** tokens."
                 if offer else "")
        if t.flash_attn == "on":  # one statement per fact (issue 67 row 5): it is on, and what proves it is not
            notes.append(f'!!! note "Flash attention is on for {text(t.name)}, not yet run on {names} itself"\n'
                         f"    llama.cpp b{c.engine.build} has flash-attention kernels for these cards; the full-size "
                         "runs held another GPU to this card's memory and prompt path, but ran that GPU's own "
                         "kernels. The tier's first `invoke verify` on these cards is the proof; `invoke apply` "
                         "rolls a failed change back.\n")
        else:
            notes.append(f'!!! note "Flash attention on {names} is planned, not yet proven"\n    llama.cpp b'
                         f"{c.engine.build} has flash-attention kernels for these cards, but no run on them has shown "
                         f"it yet.{reach} Turn it on with `invoke apply` of the solver's diff, then `invoke bench`: "
                         "apply runs the tier's scenarios before and after and rolls back a failure.\n")
    recovery = predict_load(c, t, plan)
    if t.workers:
        net = c.rpc_network
        notes.append(f'!!! danger "RPC has no authentication"\n    Anyone who reaches port {t.rpc_port} on the '
                     f"{net} network can use the workers' GPUs and memory. The workers listen on their {net} "
                     f"address only, and each worker's {firewall_of(c, t.workers)} accept the port from the "
                     f"tier's own nodes only ({', '.join(t.nodes)}).\n")
        then = (f"systemd starts it again after {recovery.restart_s:g} s" if t.manager == "systemd" else
                "its job's script starts the ended worker and then the head again inside the job (at most "
                f"{t.slurm.step_restarts} times in a row without the tier answering; after that the job ends and "
                f"comes back by {recovery.new_job_kind})"
                if t.slurm.step_restarts else f"its job ends and comes back by {recovery.new_job_kind}")
        notes.append(f'!!! note "A lost worker means a full reload"\n    llama.cpp\'s RPC has no reconnect: the head '
                     f"aborts at its next request after a worker is lost (even one that came back), {then}, and it "
                     f"loads the whole model again: back in about {whole_s(recovery.recovery_s)} s "
                     "(the capacity plan's prediction; `invoke bench.recovery` measures it).\n")
    if t.on_demand:
        notes.append(on_demand_note(c, t, plan).lstrip("\n"))
    if t.manager == "slurm" and t.slurm and t.slurm.qos and c.slurm_site:
        for q in c.slurm_site.qos:
            if t.slurm.qos in q.preempts:
                notes.append(f'!!! warning "{title(q.used_by)} preempt this tier"\n    QoS `{q.name}` (priority '
                             f"{q.priority}) preempts this tier's `{t.slurm.qos}`: its job gets SIGTERM, "
                             f"{t.slurm.grace_seconds} s to stop (its job script asks SLURM, and restarts no "
                             "step of a job that is ending), and "
                             + ("is requeued" if t.slurm.requeue else "ends; the keeper submits it again within "
                                f"{t.slurm.keeper_interval_s} s (no requeue hold)")
                             + "; it runs again when the GPUs are free, about "
                             f"{whole_s(recovery.new_job_recovery_s)} s after the preempting job ends "
                             "(predicted). Until then the gateway holds each request "
                             + (f"up to {held} s, then answers 503 with Retry-After.\n"
                                if c.gateway and (held := new_job_hold_s(c, t, plan)) else "and answers 503.\n"))
    return notes


def tier_flags(c: Cluster) -> str:
    out = []
    plans = plan_cluster(c)
    for t in c.tiers:
        out.append(f"## {t.name}\n\n{text(t.description)}\n")
        out += tier_notes(c, t, plans[t.name])
        out.append(f"**llama-server** on {t.nodes[0]} (`{fl.binary(c, c.engine.server_binary)}`):\n")
        out.append(table(["flag", "value", "what it does", "why this value"],
                         [[f"`{f.flag}`", f"`{f.value}`" if f.value is not None else "", f.what, f.why]
                          for f in kinds.server_flags(c, t)]))
        if t.workers:
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


def rehearsed_section(c: Cluster, tier: str) -> str:
    """The tier's figures measured at full size beside the planner's for the same settings (the file's rehearsals)."""
    rows = compared(c, tier)
    if not rows:
        return (f"**Measured at full size:** nothing yet for tier {text(tier)}: every figure above is the "
                "planner's.\n")
    out = [f"### {text(tier)}: measured at full size\n",
           "Each figure was measured on the tier's own command lines at full size, on cards held to this "
           "cluster's (the card column says how), beside the planner's figure for the same settings. A decode "
           "figure stands beside the planner's bound on the card it ran on.\n"]
    out.append(table(["what", "device", "settings", "planned", "measured", "measured / planned", "card", "source"],
                     [[WHAT[x.rehearsal.what], x.rehearsal.device or "tier", x.settings_text,
                       "–" if x.planned is None else f"{x.planned:,.2f} {UNITS[x.rehearsal.what]}",
                       f"{x.rehearsal.value:,.2f} {UNITS[x.rehearsal.what]}",
                       "–" if x.ratio is None else f"{x.ratio:.2f}", text(x.rehearsal.card),
                       f"{text(x.rehearsal.source)}, {x.rehearsal.date}"] for x in rows]))
    return "\n".join(out) + "\n"


def capacity(c: Cluster, plans: dict[str, TierPlan] | None = None) -> str:
    plans = plans or plan_cluster(c)
    out = []
    for name, p in plans.items():
        slots = c.tier(name).parallel
        out.append(f"## {name}: {p.model} at {p.ctx:,} tokens" + (f" ({slot_context(c.tier(name))})" if slots > 1
                                                                     else "") + "\n")
        out.append(table(["device (node)", "blocks", "weights", "KV cache", "compute", "CUDA pool", "overhead"],
                         [[f"{d.device} ({d.node})", f"{d.blocks}{' + output' if d.output else ''}", gib(d.weights),
                           gib(d.kv), gib(d.compute), gib(d.pool), gib(d.overhead)] for d in p.devices]))
        out.append("\n" + table(["device (node)", "headroom", "total", "usable"],  # the key column second
                                [[f"{d.device} ({d.node})", gib(d.headroom), gib(d.total), gib(d.capacity)]
                                 for d in p.devices]))
        facts = [f"Fits: **{'yes' if p.fits else 'no'}**."]
        if p.max_ctx is not None:
            facts.append(f"Largest context that fits: **{p.max_ctx:,}** tokens.")
        if p.flash:
            facts.append(f"With flash attention and a {p.flash.cache_type_k} K and V cache: **{p.flash.ctx:,}** "
                         "tokens fit.")
        if p.decode_bound_tps:
            full = f" ({p.decode_bound_full_ctx_tps:.1f} with a full context)" if p.decode_bound_full_ctx_tps else ""
            facts.append(f"Decode bound: **{p.decode_bound_tps:.1f} tok/s**{full}, one stream.")
        prompt = prompt_estimate(c, c.tier(name), p)
        if prompt:
            facts.append(f"A prompt that fills the context ({prompt.tokens:,} tokens): **{prompt.seconds:,.0f} s** "
                         f"before its first token ({prompt.tps:,.0f} tok/s; the API page has shorter ones).")
        facts += p.notes
        if c.tier(name).workers:
            facts.append(recovery_text(c, c.tier(name), p))
        out.append("\n" + " ".join(facts) + "\n")
        if c.tier(name).workers:
            out.append(rehearsed_section(c, name))
            out.append(quantization_choice(c, c.tier(name)))
    out.append(whole_cluster(c, plans))
    out.append("## Seed claims, computed\n")
    rows = []
    for d in c.decisions:
        for claim in d.claims:
            v = evaluate_claim(c, claim, plans)
            computed = "–" if v.computed is None else f"{v.computed:,.1f} {v.unit}"
            rows.append([text(claim.source), text(claim.what), f"{claim.claimed:,g} {v.unit}", computed,
                         "impossible" if v.refuted else "possible", f"[{d.id}](decisions.md#{d.id.lower()})"])
    out.append(table(["source", "claim", "claimed", "computed", "verdict", "decision"], rows) if rows else "None.\n")
    return "\n".join(out)


def quantization_choice(c: Cluster, tier: RpcTier) -> str:
    """The tier's model at each quantization the cluster file lists, planned on the tier's devices, split and
    context (planner/variants.py); nothing when the file lists only the one it serves."""
    found = variants(c, tier)
    if len(found) < 2:
        return ""
    rows = [[f"`{v.model}`" + (" (served)" if v.served else ""), v.quantization,
             f"{v.size_gb:,.1f}" if v.size_gb else "–", f"{v.peak_use:.0%}",
             "yes" if v.plan.fits else "**no**", f"{v.plan.max_ctx:,}" if v.plan.max_ctx else "none",
             f"{v.plan.decode_bound_tps:.1f}" if v.plan.decode_bound_tps else "–"] for v in found]
    served = next(v for v in found if v.served)
    roomier = [v for v in found if v.plan.fits and (v.plan.max_ctx or 0) > (served.plan.max_ctx or 0)]
    best = max(roomier, key=lambda v: v.plan.max_ctx or 0) if roomier else None
    advice = (f" Of the files listed, `{best.model}` fits with the most room here: a largest context of "
              f"{best.plan.max_ctx:,} tokens against {served.plan.max_ctx or 0:,} (`tiers[{tier.name}].model`)."
              if best else "")
    return (f"### {tier.name}: its model at other quantizations\n\n"
            f"Each file planned as if {tier.name} served it, on the same devices and split at {tier.ctx_size:,} "
            "tokens. The bound counts the bytes read per token only; the de-quantization work per weight (which "
            "seed 001 expected to favour Q5_K_S and Q6_K on the V100S) is not in it, so measure a file with "
            "`invoke bench` before serving it." + advice
            + "\n\n" + table(["model", "quantization", "GB", "fullest device (of usable)",
                              f"fits at {tier.ctx_size:,}", "largest context", "decode bound tok/s"], rows))


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
    if c.planner.co_reside:
        out.append("\nThe cluster file requires " + "; ".join(" + ".join(g) for g in c.planner.co_reside)
                   + " to serve at the same time (`planner.co_reside`): `invoke check` refuses a placement that "
                   "makes one of them wait for another, and names one that keeps them together.\n")
    for node in dict.fromkeys(x.slot.node for x in cplan.loads):
        out.append(f"\n### {node}\n\n{picture(f'What {node} holds at once', f'capacity-{node}')}\n")
        out.append(table(["device", "headroom", "resident at once", "total", "usable"],  # the key column second
                         [[x.slot.device + (f" ({x.slot.model})" if x.slot.model else ""), gib(x.headroom),
                           "<br>".join(f"{s.tier} ({s.what}): {gib(s.total)}" for s in x.shares),
                           gib(x.total), gib(x.slot.capacity)]
                          for x in cplan.loads if x.slot.node == node]))
    return "\n".join(out) + "\n"


def router(c: Cluster) -> str:
    if not c.router:
        return "This cluster has no model router.\n"
    rows = [[f"`{r['task']}`", r["model"], r["tier"], f"`{r['endpoint']}`"] for r in selector_rows(c)]
    default = c.router.default_model or "none: unknown tasks exit with status 2"
    why = [[", ".join(f"`{t}`" for t in rule.tasks), rule.model, prose_inline(rule.why)] for rule in c.router.rules]
    return (table(["task", "model", "tier", "endpoint"], rows) + f"\nDefault model: **{default}**.\n\n"
            + "### Why\n\n" + table(["tasks", "model", "reason"], why))

