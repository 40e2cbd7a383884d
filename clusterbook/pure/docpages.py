"""The docs site's generated sections: the cluster model -> Markdown. Pure; every value comes from the cluster."""

from __future__ import annotations

import json
import math
import posixpath
import re

from clusterbook.model.crosscheck import FLASH_ATTN_MIN_CC, FLASH_ATTN_PROVEN_CC
from clusterbook.model.schema import HIGHER_IS_BETTER, Cluster, RouterTier, RpcTier
from clusterbook.pure import engine_build as eb
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.fixsteps import fix_step_commands
from clusterbook.pure.mdtext import code as code_span
from clusterbook.pure.mdtext import demoted, fence_for, mermaid_text, prose, prose_inline, text, title
from clusterbook.pure.operations import bringup, cluster_command, tier_command
from clusterbook.pure.planner.capacity import GIB, TierPlan, plan_cluster
from clusterbook.pure.planner.findings import evaluate_claim
from clusterbook.pure.planner.loadtime import (
    cold_start_at_most_s,
    cold_start_s,
    predict_load,
    recovery_text,
    wait_cap_s,
    whole_s,
)
from clusterbook.pure.planner.residency import exclusion_text, plan_residency
from clusterbook.pure.planner.variants import variants
from clusterbook.pure.rehearsed import UNITS, WHAT, compared
from clusterbook.pure.render import monitoring as mon
from clusterbook.pure.render.artifacts import Artifact, selector_rows
from clusterbook.pure.runbooks import Expansion, PutFile

METRICS = {"decode_tps": ("decode throughput", "tok/s"), "ttft_s": ("time to first token", "s"),
           "gpu_util_pct": ("GPU utilisation", "%"), "gpu_mem_gib": ("memory per GPU", "GiB"),
           "fabric_gbps": ("fabric bandwidth", "Gbit/s"), "recovery_s": ("recovery after a worker crash", "s"),
           "api_response_s": ("API answers within", "s")}


def printable_runbooks(markdowns: list[str]) -> str:
    """Runbook pages as the sections of one page, for paper: no tabs, nothing folded."""
    return ("---\nrender_macros: false\n---\n\n# Every runbook, on one page\n\nFor printing, or for reading with "
            "no network: the same steps and commands as each runbook's own page.\n\n"
            + "\n\n".join(demoted(m) for m in markdowns) + "\n")


def last_changed(sources: list[str], history: dict[str, tuple[int, str]], shown: int = 3) -> str:
    """A page's closing line: when the files it is made from last changed (git), the newest first."""
    known = sorted((history[s][0], s, history[s][1]) for s in sources if s in history)
    if not known:
        return ""
    more = f"; and {len(known) - shown} more" if len(known) > shown else ""
    return ("\n\n---\n\n*Last changed: " + "; ".join(f"{text(source)} {text(when)}" for _, source, when
                                                     in known[:shown]) + more + ".*\n")


def picture_file(name: str, narrow: bool = False) -> str:
    """The file of a generated chart: drawn wide, or narrow for a phone."""
    return f"{name}-narrow.svg" if narrow else f"{name}.svg"


def picture(caption: str, name: str) -> str:
    """A generated chart, drawn twice: the stylesheet (docs/assets/clusterbook.css) shows the wide drawing on a
    screen and the narrow one on a phone, where its text stays readable; each opens on its own when tapped, to
    zoom."""
    return " ".join(f"[![{text(caption)}]({picture_file(name, narrow)}){{ .{css} }}]({picture_file(name, narrow)} "
                    '"Open the picture on its own, to zoom")' for narrow, css in ((False, "cb-wide"),
                                                                                   (True, "cb-narrow")))


def table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "bash") -> str:
    fence = fence_for(text)  # longer than any fence inside: the content cannot close it
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
        kind = "router mode" if t.kind == "router" else "split over RPC"
        manager = "SLURM job" if t.manager == "slurm" else "systemd"
        rows.append([f"**{t.name}**", f"{kind}, {manager}", what, nodes, f"`{topo.client_url(c, t)}`"])
    out = table(["tier", "how", "models", "nodes", "URL (the [API page](api.md) has the others)"], rows)
    for sentence in exclusion_text(plan_residency(c, plan_cluster(c))):
        out += f'\n!!! warning "Not at the same time"\n    {sentence} See the [capacity plan](capacity.md).\n'
    return out


def _example_request(c: Cluster, tier: RouterTier | RpcTier) -> tuple[str, str, int, str]:
    """(base URL, model id, max_tokens, where the API key is found or "") of a tier's examples."""
    model = tier.served_models[0]
    url = topo.client_url(c, tier)
    key = ""
    if tier.api_key:
        key = f"the file {tier.api_key.file}" if tier.api_key.file else f"${tier.api_key.env}"
    # a reasoning model writes its chain of thought first: the seeds advise 500 tokens or more
    tokens = 500 if c.model(model).reasoning_content else 100
    return url, model, tokens, key


def curl_example(c: Cluster, tier: RouterTier | RpcTier, stream: bool = False) -> str:
    url, model, tokens, key = _example_request(c, tier)
    auth = ' \\\n  -H "Authorization: Bearer $KEY"' if key else ""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": tokens}
    if stream:
        body["stream"] = True
    key_line = f"KEY=...  # the tier's API key: {key}\n" if key else ""
    return code(f"{key_line}curl -s{'N' if stream else ''} {url}/v1/chat/completions \\\n"
                f"  -H 'Content-Type: application/json'{auth} \\\n  -d '{json.dumps(body)}'")


def client_retries(seconds: float) -> int:
    """Retries the openai client needs to outlast `seconds`: it waits 0.5, 1, 2, 4, then at most 8 s between tries
    (Retry-After instead when that is 60 s or less)."""
    return 4 + max(0, math.ceil((seconds - 7.5) / 8))


def python_example(c: Cluster, tier: RouterTier | RpcTier, recovery_s: float | None, stream: bool = False) -> str:
    """The same request through the `openai` client; with retries that outlast the tier's predicted recovery."""
    url, model, tokens, key = _example_request(c, tier)
    lines = (["import os", ""] if key else []) + ["from openai import OpenAI", ""]
    lines.append(f"# the tier's API key ({key}) in the environment as KEY" if key else
                 "# the tier needs no key, but the client wants one")
    api_key = 'os.environ["KEY"]' if key else '"none"'
    options = f"base_url={json.dumps(url + '/v1')}, api_key={api_key}"
    if recovery_s:
        lines.append(f"# max_retries: the client's backoff outlasts a recovery of about {whole_s(recovery_s)} s")
        options += f", max_retries={client_retries(recovery_s)}"
    lines += ["client = OpenAI(" + ",\n                ".join(options.split(", ")) + ")"]
    call = (f"client.chat.completions.create(model={json.dumps(model)}, max_tokens={tokens},\n"
            '    messages=[{"role": "user", "content": "Hello!"}]' + (", stream=True)" if stream else ")"))
    reasoning = c.model(model).reasoning_content
    if stream:
        lines += [f"for chunk in {call}:", "    delta = chunk.choices[0].delta"]
        shown = 'getattr(delta, "reasoning_content", None) or delta.content' if reasoning else "delta.content"
        lines += [f'    print({shown} or "", end="", flush=True)']
    else:
        lines += [f"reply = {call}"]
        if reasoning:
            lines += ['print(getattr(reply.choices[0].message, "reasoning_content", None))  # the chain of thought']
        lines += ["print(reply.choices[0].message.content)"]
    return code("\n".join(lines), "python")


def example_response(c: Cluster, tier: RouterTier | RpcTier) -> str:
    """The shape of llama-server's answer to a non-streamed chat completion, with the tier's model id."""
    model = tier.served_models[0]
    message = {"role": "assistant", "content": "<the answer>"}
    if c.model(model).reasoning_content:
        message["reasoning_content"] = "<the chain of thought>"
    body = {"choices": [{"finish_reason": "stop", "index": 0, "message": message}], "created": "<unix time>",
            "model": model, "system_fingerprint": f"b{c.engine.build}-...", "object": "chat.completion",
            "usage": {"completion_tokens": "<n>", "prompt_tokens": "<n>", "total_tokens": "<n>"},
            "id": "chatcmpl-...", "timings": {"prompt_n": "<n>", "prompt_ms": "<ms>", "prompt_per_second":
                                              "<tokens/s>", "predicted_n": "<n>", "predicted_ms": "<ms>",
                                              "predicted_per_second": "<tokens/s>"}}
    return code(json.dumps(body, indent=2), "json")


def tabs(named: dict[str, str]) -> str:
    """Content tabs (pymdownx.tabbed): each body indented under its title."""
    out = []
    for name, body in named.items():
        indented = "\n".join(("    " + line) if line else "" for line in body.rstrip().splitlines())
        out.append(f'=== "{name}"\n\n{indented}\n')
    return "\n".join(out)


def quick_start(c: Cluster) -> str:
    parts = []
    for t in c.tiers:
        parts.append(f"**{t.name}** — {text(t.description or t.kind)}\n\n{curl_example(c, t)}")
    return "\n".join(parts)


def architecture(c: Cluster) -> str:
    """A Mermaid diagram of nodes, networks and tiers, drawn at its own size (not shrunk to the column: on a phone
    its text would be too small to read); a diagram wider than the page scrolls in its own box."""
    lines = ["```mermaid", '%%{init: {"flowchart": {"useMaxWidth": false}}}%%', "flowchart TB"]
    if c.gateway:
        lines.append(f'  clients(["clients{" via " + c.gateway.tailscale_name if c.gateway.tailscale_name else ""}"])')
    for name, net in c.networks.items():
        lines.append(f'  net_{_id(name)}{{{{"{name}: {net.subnet} ({net.link}, {net.bandwidth_gbps:g} Gb/s)"}}}}')
    for node in c.nodes:
        gpus = ", ".join(f"{g.count}x {mermaid_text(g.model)}" for g in node.gpus) or "no GPU"
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
        gpus = "<br>".join(f"{g.count} × {text(g.model)} ({g.memory_mib / 1024:g} GiB, CC {g.compute_capability}, "
                           f"{g.bandwidth_gbs:g} GB/s{', NUMA ' + str(g.numa_node) if g.numa_node is not None else ''})"
                           for g in n.gpus) or "–"
        route = topo.ssh_route(c, n.name)
        rows.append([f"**{n.name}**", n.hostname, ", ".join(n.roles) or "–", gpus, n.cpu_cores, f"{n.ram_gb:g} GB",
                     f"`{route.command()}`"])
    nets = [[f"**{name}**", net.role, net.link, f"`{net.subnet}`", net.mtu, f"{net.bandwidth_gbps:g} Gb/s",
             "yes" if name == c.rpc_network else "no"] for name, net in c.networks.items()]
    addrs = [[n.name] + [f"`{n.addresses.get(net, '–')}`" for net in c.networks] for n in c.nodes]
    jumps = [[name, j.address, j.user or c.access.user, j.port, j.via or "–", text(j.description)]
             for name, j in c.access.jump_hosts.items()]
    systems = [[f"**{n.name}**", f"{n.os.id} {n.os.version} ({n.os.family})",
                f"gcc-toolset-{n.os.gcc_toolset}" if n.os.gcc_toolset else "the system's",
                n.nvidia_driver or "–", text(n.cpu_model) if n.cpu_model else "–", text(n.nic) if n.nic else "–"]
               for n in c.nodes]
    out = "## Nodes\n\n" + table(["node", "host name", "roles", "GPUs", "CPU cores", "RAM", "SSH"], rows)
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
        out.append("\n" + table(["partition", "runs"], [[f"`{p}`", text(what)] for p, what in site.partitions.items()]))
    return "\n".join(out) + "\n"


def tier_notes(c: Cluster, t: RouterTier | RpcTier, plan: TierPlan) -> list[str]:
    """The warnings that matter for a tier, as admonitions, from its hardware, kind and manager."""
    notes = []
    volta = sorted({(g.model, g.compute_capability) for n in t.nodes for g in c.node(n).gpus
                    if FLASH_ATTN_MIN_CC <= g.cc < FLASH_ATTN_PROVEN_CC})
    if volta and isinstance(t, RpcTier):
        names = ", ".join(f"{title(m)} (compute capability {cc})" for m, cc in volta)
        offer = plan.flash
        reach = (f" With it and a {offer.cache_type_k} K and V cache the plan fits **{offer.ctx:,}** tokens."
                 if offer else "")
        notes.append(f'!!! note "Flash attention on {names} is planned, not yet proven"\n    llama.cpp b'
                     f"{c.engine.build} has flash-attention kernels for these cards, but no run on them has shown "
                     f"it yet.{reach} Turn it on with `invoke apply` of the solver's diff, then `invoke bench`: "
                     "apply runs the tier's scenarios before and after and rolls back a failure.\n")
    recovery = predict_load(c, t, plan)
    if isinstance(t, RpcTier):
        net = c.rpc_network
        notes.append(f'!!! danger "RPC has no authentication"\n    Anyone who reaches port {t.rpc_port} on the '
                     f"{net} network can use the workers' GPUs and memory. The workers listen on their {net} "
                     f"address only, and each worker's nftables rules accept the port from the tier's own nodes "
                     f"only ({', '.join(t.nodes)}).\n")
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
                             f"{t.slurm.grace_seconds} s to stop, and "
                             + ("is requeued" if t.slurm.requeue else "ends; the keeper submits it again within "
                                f"{t.slurm.keeper_interval_s} s (no requeue hold)")
                             + "; it runs again when the GPUs are free, about "
                             f"{whole_s(recovery.new_job_recovery_s)} s after the preempting job ends "
                             "(predicted). Until then the gateway answers 503.\n")
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


def slot_context(tier) -> str:
    """The context one request gets: llama-server gives each of its --parallel slots ctx_size / parallel."""
    if tier.parallel == 1:
        return f"{tier.ctx_size:,}"
    return f"{tier.ctx_size // tier.parallel:,} per request ({tier.parallel} slots share {tier.ctx_size:,})"


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
        out.append("\n" + table(["device (node)", "total", "usable", "headroom"],
                                [[f"{d.device} ({d.node})", gib(d.total), gib(d.capacity), gib(d.headroom)]
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
        if p.prompt_estimate_tps:
            facts.append(f"Prompt processing estimate: {p.prompt_estimate_tps:,.0f} tok/s.")
        facts += p.notes
        if c.tier(name).kind == "rpc":
            facts.append(recovery_text(c, c.tier(name), p))
        out.append("\n" + " ".join(facts) + "\n")
        if c.tier(name).kind == "rpc":
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
    why = [[", ".join(f"`{t}`" for t in rule.tasks), rule.model, prose_inline(rule.why)] for rule in c.router.rules]
    return (table(["task", "model", "tier", "endpoint"], rows) + f"\nDefault model: **{default}**.\n\n"
            + "### Why\n\n" + table(["tasks", "model", "reason"], why))


def fix_commands(c: Cluster, trouble) -> str:
    """The entry's read-only diagnosis as one block to paste, then each step that acts under a warning that says
    what it disturbs."""
    looks = [line for step in trouble.fix if not step.act for line in fix_step_commands(c, trouble, step)]
    out = ["**Diagnose** (read-only, each command returns on its own):\n\n" + code("\n".join(looks))] if looks else []
    for step in (s for s in trouble.fix if s.act):
        block = code("\n".join(fix_step_commands(c, trouble, step)))
        out.append(f'!!! warning "Act: this changes the cluster"\n    It disturbs {text(step.disturbs)}.\n\n'
                   + "\n".join(f"    {line}" if line else "" for line in block.splitlines()) + "\n")
    return "\n".join(out)


def maintenance(c: Cluster) -> str:
    """The four routine procedures, with this cluster's hosts, tiers and files: a node out for other work, a model
    added, an API key rotated, llama.cpp upgraded."""
    def ssh(host: str, command: str) -> str:
        return topo.ssh_route(c, host).command(command)

    def task(action: str, tier: str) -> str:
        return tier_command(c, action, tier).strip("`")

    out = ["## Take a node out for other work (VASP, hardware) { #drain }\n"]
    ctl = c.slurm_controller
    for node in (n for n in c.nodes if any(n.name in t.nodes for t in c.tiers)):
        tiers = [t for t in c.tiers if node.name in t.nodes]
        slurm = ctl is not None and any(t.manager == "slurm" for t in tiers)
        drain = [ssh(ctl, f"scontrol update NodeName={node.name} State=DRAIN Reason=maintenance")] if slurm else []
        drain += [task("restart" if t.manager == "slurm" else "stop", t.name) for t in tiers]
        back = [ssh(ctl, f"scontrol update NodeName={node.name} State=RESUME")] if slurm else []
        back += [task("deploy", t.name) for t in tiers if t.manager != "slurm"]
        how = []
        if slurm:
            how.append("SLURM stops placing jobs on it" + ("" if c.slurm else " (as a SLURM administrator: this "
                       "cluster's SLURM is managed elsewhere)") + ", and a SLURM tier's job is submitted again and "
                       "starts where the queue allows (a tier pinned to this node waits until it is back)")
        if any(t.manager != "slurm" for t in tiers):
            how.append("a systemd tier stops, and starts again with its deploy")
        out.append(f"**{text(node.name)}** holds {', '.join(text(t.name) for t in tiers)}: " + "; ".join(how)
                   + ".\n\n" + code("\n".join(drain)) + "When the work is done:\n\n" + code("\n".join(back)))
    out.append("## Add a model { #add-a-model }\n\nAdd it to `models:` in the cluster file (id, file, url, size), "
               "to a tier (`models:` of a router tier, or `model:` of an RPC tier) and, for a task type, to the "
               "router's rules. Then take its checksum from a node that fetched it, check the plan, and let "
               "`apply` deploy it (it runs the tier's scenarios and rolls back a change that fails them):\n\n"
               + code("\n".join(["invoke models.fetch", "invoke models.hash   # paste each sha256 into the file",
                                 "invoke check && invoke plan", "invoke apply"])))
    keyed = [t for t in c.tiers if t.api_key and t.api_key.file]
    out.append("## Rotate an API key { #rotate-a-key }\n")
    if not keyed:
        out.append("No tier reads its API key from a file here: nothing to rotate.\n")
    for t in keyed:
        out.append(f"**{text(t.name)}**: the deploy makes a new random key where the file is missing, and the tier "
                   "reads it when it starts. Hand the new key to the tier's clients (they get 401 until they "
                   "have it):\n\n" + code("\n".join([ssh(t.nodes[0], f"rm -f {t.api_key.file}"),
                                                      task("deploy", t.name), task("restart", t.name),
                                                      ssh(t.nodes[0], f"cat {t.api_key.file}")])))
    out.append("## Upgrade llama.cpp { #upgrade-llama-cpp }\n\nSet `engine.build` (and the sha256 of every patch "
               "in `engine.patches` that still applies) in the cluster file. `apply` builds the new release beside "
               "the running one, links it, restarts each tier and runs its scenarios; a tier that fails them is "
               "rolled back to the build before, which stays on every node:\n\n"
               + code("\n".join(["invoke check", "invoke apply --dry   # what will change, node by node",
                                 "invoke apply"]))
               + "Later, should a tier need the build before:\n\n"
               + code("\n".join(f"invoke rollback --tier {t.name}" for t in c.tiers)))
    return "\n".join(out)


def owner(c: Cluster) -> str:
    """Who answers for the cluster and the escalation after them, or that the cluster file does not say."""
    o = c.owner
    if o is None:
        return (f"!!! warning \"No owner recorded\"\n    The cluster file does not say who answers for "
                f"{text(c.cluster.name)}: add an `owner:` section (name, contact, escalation) and rebuild the site.\n")
    rows = [["owner", text(o.name), text(o.contact), text(o.when) or "first"]]
    rows += [[f"escalation {i}", text(e.name), text(e.contact), text(e.when) or "–"]
             for i, e in enumerate(o.escalation, 1)]
    return table(["", "who", "how to reach them", "when"], rows)


def when_index(c: Cluster) -> str:
    """What an operator sees, each line leading to its troubleshooting entry: HTTP statuses, then alerts, then
    every entry's symptom in the words it is written in."""
    ids = {t.id for t in c.troubleshooting}
    rows: list[tuple[int, str, str]] = []
    for t in c.troubleshooting:
        for status in sorted(set(re.findall(r"\b([45]\d\d)\b", t.symptom))):
            rows.append((0, f"HTTP {status}: {text(t.symptom)}", t.id))
    for rule in mon.alerts(c) if c.monitoring else []:
        entry = rule["annotations"].get("troubleshooting")
        if entry in ids:
            tier = rule["labels"].get("tier")
            rows.append((1, f"alert {code_span(rule['alert'])}" + (f" (tier {text(tier)})" if tier else "")
                         + f": {text(rule['annotations']['summary'])}", entry))
    rows += [(2, text(t.symptom), t.id) for t in c.troubleshooting]
    if not rows:
        return ""
    return table(["when you see", "go to"], [[what, f"[{entry}](#{entry})"] for _, what, entry in
                                            sorted(rows, key=lambda r: r[0])])


def troubleshooting(c: Cluster) -> str:
    out = []
    for t in c.troubleshooting:
        out.append(f"## {text(t.symptom)} {{ #{t.id} }}\n\n**Cause.**\n\n{prose(t.cause)}\n**Fix.**\n\n"
                   f"{fix_commands(c, t)}")  # the id is the entry's anchor: alerts link to it
    return "\n".join(out) or "No entries.\n"


def decisions(c: Cluster, plans: dict[str, TierPlan] | None = None) -> str:
    out = []
    for d in c.decisions:
        out.append(f"## {d.id} {{ #{d.id.lower()} }}\n\n### {text(d.title)}\n\n*{d.date}"
                   + (f" · sources: {text(', '.join(d.sources))}" if d.sources else "") + "*\n")
        out.append(f"**Context.**\n\n{prose(d.context)}\n**Decision.**\n\n{prose(d.decision)}\n"
                   f"**Consequences.**\n\n{prose(d.consequences)}\n")
        for claim in d.claims:
            v = evaluate_claim(c, claim, plans or {})
            if v.computed is not None:
                out.append(f"> {text(claim.source)} claimed {claim.claimed:,g} {v.unit} for {text(claim.what)}; "
                           f"computed: "
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


def _base_urls(c: Cluster, t: RouterTier | RpcTier) -> list[list[str]]:
    rows = []
    if topo.gateway_url(c, t.name):
        rows.append(["through the gateway's Tailscale name (clients)", f"`{topo.gateway_url(c, t.name)}`"])
    for route in (c.gateway.routes if c.gateway else []):
        if route.tier == t.name:
            for address in c.gateway.listen:
                rows.append([f"through the gateway on {c.gateway.node}, the tier's own port",
                             f"`http://{address}:{route.port}`"])
            if c.gateway.path_port:
                rows.append([f"through the gateway on {c.gateway.node}, by path",
                             f"`http://{c.gateway.listen[0]}:{c.gateway.path_port}{route.path.rstrip('/')}`"])
    where = ("where its SLURM job runs (the gateway follows it; the endpoint registry records it)"
             if t.manager == "slurm" else "direct, on the tier's node (cluster networks only)")
    rows.append([where, f"`{topo.endpoint_url(c, t)}`"])
    return rows


def tailnet_access(c: Cluster) -> str:
    """Who may reach the published API: a Tailscale grant for the gateway's HTTPS port (tailscale serve)."""
    if not c.gateway or not c.gateway.tailscale_name:
        return ""
    policy = {"tagOwners": {"tag:ai-gateway": ["autogroup:admin"]},
              "grants": [{"src": ["group:ai-users"], "dst": ["tag:ai-gateway"], "ip": ["tcp:443"]}]}
    return ("## Who can reach it\n\nThrough `tailscale serve`, every device of the tailnet reaches "
            f"`{c.gateway.url}` by default. To let only some users in, tag {c.gateway.node} (`tag:ai-gateway` "
            "below) and grant HTTPS to a group in the tailnet policy file (admin console, Access controls); "
            "`group:ai-users` is yours to define:\n\n" + code(json.dumps(policy, indent=2), "json") +
            '\n!!! warning "The gateway\'s own ports"\n    nginx also listens on ' +
            ", ".join(f"`{a}`" for a in c.gateway.listen) + " (ports " +
            ", ".join(str(r.port) for r in c.gateway.routes) + "): anyone on those networks passes the grant "
            "by. The tiers' API key, where one is set, still applies.\n")


def api(c: Cluster) -> str:
    out = []
    plans = plan_cluster(c)
    for t in c.tiers:
        base = topo.client_url(c, t)
        out.append(f"## {t.name}\n")
        if t.description:
            out.append(f"{text(t.description)}\n")
        out.append(table(["base URL", "reached"], [[u, w] for w, u in _base_urls(c, t)]))
        out.append("\n**Model ids** (the `model` field of a request):\n")
        out.append(table(["model id", "context (tokens)", "reasoning_content"],
                         [[f"`{m}`", slot_context(t), "yes" if c.model(m).reasoning_content else "no"]
                          for m in t.served_models]))
        if isinstance(t, RouterTier):
            most = f"at most {t.models_max} at once" if t.models_max else "no limit on how many at once"
            out.append(f"\nRouter mode: a model loads on its first request ({most}); "
                       "`GET /v1/models` shows which are loaded. A model id the tier does not serve gets an error "
                       "naming it (see Troubleshooting, \"model not found\").\n")
        out.append("\n**Endpoints**\n")
        rows = [["`POST`", f"`{base}/v1/chat/completions`", "OpenAI-compatible chat completion"],
                ["`GET`", f"`{base}/v1/models`", "models this tier serves" + (" (and their load state)"
                                                                              if isinstance(t, RouterTier) else "")],
                ["`GET`", f"`{base}/health`", "200 when ready, 503 while loading; never needs the API key"]]
        if isinstance(t, RpcTier):
            rows.append(["`GET`", f"`{base}/metrics`", "Prometheus metrics (`--metrics` is on)"])
        out.append(table(["method", "URL", "what"], rows))
        if t.api_key:
            out.append("\nRequests need `Authorization: Bearer <key>`; without it the tier answers 401. The key "
                       f"is in {_example_request(c, t)[3]}.\n")
        load = predict_load(c, t, plans[t.name])
        recovery = load.recovery_s if isinstance(t, RpcTier) or t.manager == "slurm" else None
        out.append("\n**Examples**\n")
        out.append(tabs({"curl": curl_example(c, t), "Python (openai)": python_example(c, t, recovery),
                         "Streaming (curl)": curl_example(c, t, stream=True),
                         "Streaming (Python)": python_example(c, t, recovery, stream=True),
                         "Example response": example_response(c, t)}))
        reasoning = [m for m in t.served_models if c.model(m).reasoning_content]
        if reasoning:
            out.append(f'\n!!! tip "Reasoning models"\n    {", ".join(reasoning)} returns its chain of thought in '
                       "`choices[0].message.reasoning_content` (streamed as `delta.reasoning_content`) and the answer "
                       "in `content`. The chain of thought comes first: give `max_tokens` room for both (500 or "
                       "more), or the answer is cut off before it starts.\n")
        if recovery is not None:
            cause = "a worker crash" if isinstance(t, RpcTier) else "a crash of its server"
            seconds = whole_s(recovery)
            preempted = ("" if load.new_job_recovery_s is None else "; after a preemption it waits until SLURM "
                         f"gives its GPUs back, and is back about {whole_s(load.new_job_recovery_s)} s after that")
            routed = c.gateway and any(r.tier == t.name for r in c.gateway.routes)
            got = (f"new ones get `503` with `Retry-After: {seconds}` and a JSON `unavailable_error` from the "
                   "gateway" if routed else "new ones are refused, or get `503` \"Loading model\" while it loads")
            out.append(f'\n!!! note "During a recovery"\n    After {cause} the tier is gone for about '
                       f"{seconds} s (the capacity plan's prediction){preempted}: requests in flight end without an "
                       f"answer (a stream stops without an error event), {got}. Retry with a backoff for that long "
                       "(the `openai` client retries a 503 only twice by default: the Python examples raise its "
                       "`max_retries`); `/health` answers 200 again when the tier is back.\n")
        if t.on_demand:
            out.append(on_demand_note(c, t, plans[t.name]))
    out.append(tailnet_access(c))
    return "\n".join(out)


def on_demand_note(c: Cluster, t: RouterTier | RpcTier, plan: TierPlan) -> str:
    """What a tier on demand costs a client: its idle time, the wait of a first request, the cap and past it."""
    cold, cap = whole_s(cold_start_s(c, t, plan)), wait_cap_s(c, t, plan)
    after_pass = whole_s(cold_start_at_most_s(c, t, plan))
    return (f'\n!!! note "On demand: the first request after a quiet spell waits about {cold} s"\n'
            f"    After {t.on_demand.idle_s:,} s without a request (and none in flight) the tier gives its GPUs "
            "back to the queue. The next request starts it again and waits at the gateway while it does: about "
            f"{cold} s (the capacity plan's predicted cold start; {after_pass} s when SLURM has just run a "
            f"scheduling pass: it starts no job within {c.slurm_batch_sched_delay_s} s of one), at most {cap} s; "
            "the answer then comes as usual. "
            f"Past {cap} s (the GPUs are busy, or its operator stopped the tier) it gets `503` with "
            f"`Retry-After: {cold}`. Give the first request's client a timeout above {cap} s; concurrent first "
            "requests start the tier once.\n")


def files_index(artifacts: list[Artifact]) -> str:
    rows = [[a.node, f"[`{a.path}`]({download_path(a)})", a.about] for a in artifacts]
    return table(["node", "file (download)", "what"], rows)


# What a generated file may end in and be offered for download under its own name; any other (.md, which MkDocs
# would render through the macros engine as a page, .html or .svg, which a browser would run) gets .txt added.
DOWNLOAD_SUFFIXES = frozenset({"", ".service", ".timer", ".socket", ".conf", ".env", ".yml", ".yaml", ".ini", ".nft",
                               ".json", ".sbatch", ".diff", ".sh", ".py", ".rules", ".txt"})


def download_path(a: Artifact) -> str:
    """Where the site offers a generated file, relative to the files pages."""
    suffix = posixpath.splitext(a.path)[1]
    return f"files/{a.node}{a.path}" + ("" if suffix in DOWNLOAD_SUFFIXES else ".txt")


def files_verbatim(artifacts: list[Artifact]) -> str:
    out = []
    lang = {"unit": "ini", "env": "bash", "script": "bash", "nginx": "nginx", "nftables": "text", "ini": "ini"}
    for a in artifacts:  # each file folded (pymdownx.details): the page lists them all, opened one at a time
        block = code(a.text, lang.get(a.kind, "text"))
        body = "\n".join(("    " + line) if line else "" for line in block.splitlines())
        out.append(f"### {a.node}: `{a.path}`\n\n{a.about} · [download]({download_path(a)})\n\n"
                   f'??? note "{a.path} ({len(a.text.splitlines())} lines)"\n\n{body}\n')
    return "\n".join(out)


def runbook_page(expansion: Expansion) -> str:
    """The same expansion `--dry` prints: every step, every host, the exact commands and files."""
    out = [f"# {expansion.page_title}\n", expansion.page_explain + "\n"]
    if expansion.generation:
        out.append("!!! note \"Generations\"\n    Every file this runbook replaces (and the engine link it moves) is "
                   "kept on its node as a generation (`storage.generations_dir`): `invoke rollback` puts it back, "
                   "and `invoke apply` does so by itself when the scenarios fail after a change. See "
                   "[Changes](../changes.md).\n")
    for i, step in enumerate(expansion.steps, 1):
        out.append(f"## {i}. {step.page_title}\n")
        if step.page_explain:
            out.append(step.page_explain + "\n")
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
                                     f"{a.delay:g} s apart)" + (f"; fails at once when it has {a.abort_when!r}"
                                                                if a.abort_when else ""))
                    lines.append(a.command)
            for name, command in step.handlers.get(host, {}).items():
                lines.append(f"# handler {name}, when a file above changed:\n{command}")
            out.append(f"**{host}**\n\n{code(chr(10).join(lines))}")
    return "\n".join(out)


def slug(runbook_id: str, tier: str | None) -> str:
    return f"{runbook_id}-{tier}" if tier else runbook_id


def observations(c: Cluster) -> str:
    """What the cluster's own earlier records measured (the seeds), each with its source, date and setup."""
    if not c.observations:
        return "None recorded in the cluster file.\n"
    rows = [[text(o.what), f"{o.value:,g} {text(o.unit)}", o.tier or "–", text(o.setup) or "as the file",
             f"{text(o.source)}, {o.date}"] for o in c.observations]
    return table(["what", "measured", "tier", "setup", "source"], rows)


def criteria(c: Cluster) -> str:
    """The earlier records' success criteria, each beside the scenarios that check it now or the decision that
    replaced it."""
    if not c.criteria:
        return "None recorded in the cluster file.\n"
    rows = [[text(k.text), text(k.source),
             "<br>".join(text(s) for s in k.scenarios) or "–",
             f"[{k.decision}](decisions.md#{k.decision.lower()})" if k.decision else "–", text(k.note) or "–"]
            for k in c.criteria]
    return table(["criterion", "source", "checked by (invoke verify)", "decision", "today"], rows)


def prerequisites(c: Cluster) -> str:
    """What must be true before the first task runs, from the cluster file: where clusterbook runs and how it reaches
    each node, and per node the OS, driver, CUDA, fabric address and the folders that must be mounted."""
    lines = ["- **Where clusterbook runs**: a Linux machine with this repository, Python 3.11 or newer and the "
             "OpenSSH client (`./setup` installs the rest on Debian). It reaches every node as "
             f"`{c.access.user}` with a key (no passwords), checking host keys against "
             f"`{c.access.known_hosts}`: put each node's and jump host's key there first "
             "(`ssh-keyscan`, compared with the host's own `ssh-keygen -lf`)."]
    if c.storage.shared_dir:
        lines.append(f"- **Shared file system**: `{c.storage.shared_dir}` mounted on every node (the build, the batch "
                     f"scripts and the endpoint registry `{c.storage.endpoint_dir}` live there).")
    shared = c.storage.shared_dir.rstrip("/") + "/" if c.storage.shared_dir else None
    local = [d for d in (c.storage.models_dir, c.storage.log_dir) if not shared or not d.startswith(shared)]
    if local:
        lines.append("- **Folders on each tier node**: " + ", ".join(f"`{d}`" for d in local) + "; "
                     f"`{c.storage.models_dir}` with room for the node's models (`invoke preflight` checks the free "
                     "space).")
    if shared and c.storage.log_dir.startswith(shared):
        lines.append(f"- **Logs**: `{c.storage.log_dir}`, on the shared file system: the jobs write there on their "
                     "nodes, and `invoke logs`, the keeper and the troubleshooting commands read it on the controller.")
    if c.engine.cuda_version:
        lines.append(f"- **CUDA {c.engine.cuda_version}** on every GPU node"
                     + (f", its libraries in `{c.engine.cuda_lib_dir}`" if c.engine.cuda_lib_dir else "")
                     + " (the build node also needs its compiler, nvcc).")
    lines.append(f"- **The {c.rpc_network} network** up on every tier node with MTU "
                 f"{c.networks[c.rpc_network].mtu} ({c.networks[c.rpc_network].link}).")
    rows = []
    for n in c.nodes:
        os_ = f"{n.os.id} {n.os.version}" + (f", gcc-toolset-{n.os.gcc_toolset}" if n.os.gcc_toolset else "")
        if "os" not in n.model_fields_set:
            os_ += " (assumed: the file does not say)"
        rows.append([n.name, f"`{topo.ssh_route(c, n.name).command()}`", text(os_),
                     text(n.nvidia_driver or "–") if n.gpus else "no GPU",
                     n.addresses.get(c.rpc_network, "–")])
    return ("\n".join(lines) + "\n\n" + table(["node", "reached with", "OS", "NVIDIA driver",
                                                 f"{c.rpc_network} address"], rows)
            + "\n`invoke preflight` checks all of it on every node and names what differs; every deploy runs it "
              "first.\n")


def slurm_asks(c: Cluster) -> str:
    """Where SLURM is managed elsewhere: what its administrators must have set for the tiers, as slurm.conf and
    sacctmgr lines from the cluster file (partitions, QoS, a GPU gres per node, the requeue hold, preemption)."""
    tiers = [t for t in c.tiers if t.slurm]
    if c.slurm or not tiers:
        return ""
    gpu_nodes = [n for n in c.nodes if n.gpus and any(n.name in t.nodes for t in tiers)]
    partitions = sorted({t.slurm.partition for t in tiers})
    hold = c.planner.site_requeue_hold_s
    lines = ["# slurm.conf", "GresTypes=gpu", "PreemptType=preempt/qos", "PreemptMode=REQUEUE"]
    lines += [f"NodeName={n.name} Gres=gpu:{len(n.gpu_devices)} RealMemory={int(n.ram_gb * 1e9 / 2**20)}"
              "  # beside the node's other settings" for n in gpu_nodes]
    qos = {t.slurm.qos for t in tiers if t.slurm.qos}
    grace = {}  # partition or QoS -> the longest grace time a tier's job there needs (SIGTERM to SIGKILL)
    for t in tiers:
        key = t.slurm.qos or t.slurm.partition
        grace[key] = max(grace.get(key, 0), t.slurm.grace_seconds)
    lines += [f"PartitionName={p} Nodes={','.join(n.name for n in gpu_nodes)}"
              + (f" GraceTime={grace[p]}" if p in grace and p not in qos else "") + "  # beside its other settings"
              for p in partitions]
    requeued = [t for t in tiers if t.slurm.requeue]
    if requeued:
        lines.append("AuthInfo=cred_expire=30  # a requeued job waits 30 s, not SLURM's default 120 (the lab's, "
                     "measured)" if not hold else f"AuthInfo=cred_expire={hold}  # as the cluster file declares")
    if qos and c.slurm_site:
        lines.append("# sacctmgr")
        for q in c.slurm_site.qos:
            if q.name in qos or q.preempts:
                pre = f" preempt={','.join(q.preempts)}" if q.preempts else ""
                time = f" gracetime={grace[q.name]}" if q.name in grace else ""
                mode = (" preemptmode=cancel" if q.name in grace and not any(t.slurm.requeue for t in tiers
                                                                               if t.slurm.qos == q.name) else "")
                lines.append(f"sacctmgr -i add qos {q.name} set priority={q.priority}{pre}{time}{mode}")
    gres = sorted({t.slurm.gres for t in tiers if t.slurm.gres})
    return ("What the tiers' jobs ask SLURM for, and so what its administrators must have set up (clusterbook "
            f"does not configure this cluster's SLURM): the partition{'s' if len(partitions) > 1 else ''} "
            + ", ".join(f"`{p}`" for p in partitions) + (", the QoS " + ", ".join(f"`{q}`" for q in sorted(qos))
                                                           if qos else "")
            + (", the generic resource " + ", ".join(f"`{g}`" for g in gres) if gres else "")
            + " on every GPU node, preemption with the grace time each job's shutdown needs (SIGTERM, then SIGKILL "
              "after it)" + (", and the requeue hold the planner assumes" if requeued else
                             ": a preempted job ends and the keeper submits it again, so no requeue hold applies")
            + ". As slurm.conf and sacctmgr lines:\n\n" + code("\n".join(lines), "text") + keeper_load(c, tiers))


def keeper_load(c: Cluster, tiers: list) -> str:
    """What the keeper asks of slurmctld: one squeue per SLURM tier at its interval (for the administrators)."""
    interval = min(t.slurm.keeper_interval_s for t in tiers)
    return (f"\nThe keeper on {text(c.keeper_node)} also asks slurmctld once every "
            f"{interval} s: one `squeue -n <job>` per SLURM tier ({len(tiers)} in all), to submit a tier's job "
            "again when it has none pending or running (`slurm.keeper_interval_s`).\n")


def deploy_order(c: Cluster) -> list[tuple[str, str]]:
    """The tiers in the order the plan deploys them, each with what the plan says of it: tiers that run beside
    every other first (file order), then the tiers of an exclusion, the one with more GPUs first (it holds them;
    the other's job waits in the queue until it ends)."""
    cplan = plan_residency(c, plan_cluster(c))
    excluded = {name: e for e in cplan.exclusions for name in (e.first, e.second)}
    gpus = {t.name: sum(len(c.node(n).gpu_devices) for n in t.nodes) for t in c.tiers}
    order = sorted(c.tiers, key=lambda t: (t.name in excluded, -gpus[t.name] if t.name in excluded else 0))
    out = []
    for t in order:
        e = excluded.get(t.name)
        other = (e.second if e.first == t.name else e.first) if e else None
        first = other is not None and order.index(c.tier(other)) > order.index(t)
        note = ("" if e is None else f" It holds its GPUs first; {other} waits while it runs ({e.reason})." if first
                else f" Its job waits in the queue while {other} runs ({e.reason}).")
        out.append((t.name, note))
    return out


def bringup_steps(c: Cluster) -> str:
    """The production guide's numbered bring-up: every task of operations.bringup, in its order (the runbook index
    and the navigation follow the same list), each with what it does on this cluster."""
    patched = (f" with {len(c.engine.patches)} patch(es) of its own (" + ", ".join(
        f"`{p.file}`: {text(p.about)}" for p in c.engine.patches) + "), each pinned by its sha256"
        if c.engine.patches else "")
    notes = dict(deploy_order(c))
    ordered = iter(notes)  # the tiers' places in the bring-up, filled in the plan's deploy order
    steps = [bringup_text(c, op, patched, notes, next(ordered) if op.tier else None) for op in bringup(c)]
    steps.append("`invoke verify` — the acceptance scenarios against the cluster; a rollback returns to what "
                 "they passed on.")
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1)) + "\n"


def bringup_text(c: Cluster, op, patched: str, notes: dict[str, str], tier: str | None) -> str:
    """One bring-up step: its command and what it does on this cluster (a tier's step: `tier`, the plan's next)."""
    if tier:
        t = c.tier(tier)
        return (f"{tier_command(c, 'deploy', tier)} — the {tier} tier"
                + (" (RPC workers first, then the head)" if t.kind == "rpc" else "") + "." + notes.get(tier, ""))
    if op.task == "deploy.install":
        return (f"{cluster_command(c, 'deploy.install')} — llama.cpp {c.engine.tag}{patched} on every tier node: "
                f"{engine_install(c)}, into `{posixpath.dirname(c.engine.install_dir.rstrip('/'))}` (its own "
                "folder: what ran before keeps its binaries).")
    if op.task == "models.fetch":
        return f"`invoke models.fetch` — each node's models into `{c.storage.models_dir}`."
    if op.task == "stop.legacy":
        units = ", ".join(f"`{u.name}` on " + ", ".join(u.nodes) for u in c.legacy.units)
        held = [f"cancels the jobs {', '.join(f'`{j}`' for j in c.legacy.slurm_jobs)}"] if c.legacy.slurm_jobs else []
        held += [f"stops and disables {units}"] if c.legacy.units else []
        held += [f"moves {len(c.legacy.files)} files aside into `{c.storage.generations_dir}/legacy/` (the nginx "
                 "site, scripts and unit files; kept, not deleted)"] if c.legacy.files else []
        return (f"{cluster_command(c, 'stop.legacy')} — retires what ran before clusterbook "
                f"({text(c.legacy.source)}), which holds the GPUs and ports the tiers need: it " + "; ".join(held)
                + ". It runs once the build and the models are in place, so the earlier tiers serve until the new "
                "ones start; `invoke restore.legacy` is the way back.")
    if op.task == "deploy.router":
        return f"{cluster_command(c, 'deploy.router')} — the model selector" + (
            f" (`{c.router.script}`)" if c.router else "") + "."
    if op.task == "deploy.gateway":
        return (f"{cluster_command(c, 'deploy.gateway')} — nginx on {c.gateway.node} and the endpoint updater"
                + (", published with `tailscale serve`" if c.gateway.tailscale_name else "") + ".")
    if op.task == "deploy.monitoring":
        unrouted = (f" Its alerts reach no one yet (decision {text(c.monitoring.alerts_unrouted)}): give "
                    "`monitoring.alert_email` or `monitoring.alert_webhook` in the cluster file, drop "
                    "`alerts_unrouted` and deploy it again." if not mon.alert_destinations(c) else "")
        return (f"{cluster_command(c, 'deploy.monitoring')} — Prometheus and Alertmanager on {c.monitoring.node}, "
                "the node exporter everywhere (see [monitoring](monitoring.md))." + unrouted)
    return f"`{op.command}` — {text(op.doc)}"


def engine_install(c: Cluster) -> str:
    """Where the llama.cpp build comes from and how it reaches the nodes, for the production guide."""

    if c.engine.release_url:
        return f"the release is downloaded from `{c.engine.release_url}`"
    if not c.storage.shared_dir:
        return "no release_url and no shared file system: the build is copied to every node by hand"
    plan = eb.plan_build(c)
    source = (f"the source tarball `{c.engine.source.tarball}` (sha256 checked)" if c.engine.source.tarball
              else f"the PyPI source of {eb.PYPI_PACKAGE} {c.engine.build}.0.0")
    return (f"{plan.node} builds it from {source} with `cmake {' '.join(plan.options)}` "
            f"(targets {', '.join(plan.targets)}; `invoke deploy.build` runs only this part) and leaves "
            f"`{plan.release}` with its sha256; every node unpacks it into `{eb.install_root(c)}/{c.engine.tag}`, "
            f"and `{c.engine.install_dir}` links to its `bin/`, so the build before stays beside it")


def where_alerts_go(c: Cluster) -> str:
    """Who hears of an alert: the receivers, or a warning that no one does."""
    places = mon.alert_destinations(c)
    if places:
        return ("**Where alerts go:** " + "; ".join(text(p) for p in places)
                + ", when they fire and when they resolve.\n")
    return ('!!! warning "Alerts reach no one yet"\n    Alertmanager has no receiver: an alert shows only in its web '
            f"UI on {c.monitoring.node}, port {c.monitoring.alertmanager_port}, as decision "
            f"{text(c.monitoring.alerts_unrouted)} accepts for now. Give `monitoring.alert_webhook` or "
            "`monitoring.alert_email` (the on-call's address and the mail relay) in the cluster file.\n")


def _monitoring_source(c: Cluster) -> str:
    """Where the monitoring node's Prometheus and Alertmanager come from, by its OS family."""
    m = c.monitoring
    r = m.el_releases
    if c.node(m.node).os.family != "el" or not r:
        return f"They are {text(c.node(m.node).os.id)}'s packages. "
    return ("No EL package has them: they come from the release tarballs "
            f"{code_span(r.prometheus.url)} (sha256 `{r.prometheus.sha256}`) and {code_span(r.alertmanager.url)} "
            f"(sha256 `{r.alertmanager.sha256}`), refused if a sum differs. ")


def monitoring(c: Cluster) -> str:
    """What Prometheus scrapes, every alert with its threshold and troubleshooting entry, and the targets' PromQL."""

    m = c.monitoring
    if not m:
        return "This cluster file has no `monitoring` section: nothing is scraped and no alert is rendered.\n"
    out = [f"Prometheus and Alertmanager run on {m.node} (port {m.port}, alerts on {m.alertmanager_port}), scraping "
           f"every {m.scrape_interval_s} s and keeping {m.retention_days} days; journald keeps at most "
           f"{m.journald_max_use} on every node. " + _monitoring_source(c) + "The files are on the [service "
           "files](files.md) page; "
           "`invoke check` runs `promtool check config`, `promtool check rules` and the generated "
           "`promtool test rules` on them.\n", where_alerts_go(c), "## What is scraped\n"]
    rows = [["`node`", ", ".join(n.name for n in c.nodes), f"the node exporter, port {m.node_exporter_port}"
             + ("; GPU figures from nvidia-smi through its textfile collector on "
                + ", ".join(n.name for n in c.nodes if n.gpus) + " (utilisation, memory, temperature, power, the "
                "kernel's NVIDIA Xid errors)" if any(n.gpus for n in c.nodes) else "")]]
    for t in c.tiers:
        how = ("where its SLURM job runs: the endpoint registry, rewritten into a target file every "
               f"{m.scrape_interval_s} s" if t.manager == "slurm" else f"`{topo.endpoint_url(c, t)}`")
        if isinstance(t, RouterTier):
            how += "; one target per model (`?model=ID&autoload=false`: scraping never loads a model)"
        rows.append([f"`{mon.job(t)}`", t.name, f"llama-server's `/metrics`, {how}"])
    out.append(table(["job", "what", "how"], rows))
    out.append(f"\nBeside the scrapes, {m.node} asks every tier as a client does, every {m.probe_interval_s} s "
               "(`clusterbook-tier-probe.timer`): `/health` (`clusterbook_tier_healthy`), a one-token chat completion "
               "whose duration is the time to first token (`clusterbook_tier_ttft_seconds`; a router-mode tier is "
               "asked only through a model it has loaded, so the probe never loads one) and, for a SLURM tier, "
               "whether its endpoint record exists (`clusterbook_tier_registered`) and its job is pending "
               "(`clusterbook_tier_pending`, from `squeue`). The node exporter on "
               f"{m.node} serves these figures.\n")
    demand = [t for t in c.tiers if t.on_demand]
    if demand:
        out.append(f"\nThe keeper on {text(c.keeper_node)} writes, at each run, whether each tier on demand is "
                   "released (`clusterbook_tier_released`, 1 or 0) and the GPUs it gives back meanwhile "
                   "(`clusterbook_tier_released_gpus`) for the node exporter there. A released tier's TierDown and "
                   "EndpointMissing stay quiet; the GPU-seconds returned over a day are "
                   f"`sum_over_time(clusterbook_tier_released_gpus[1d]) * {m.scrape_interval_s}`.\n")
    out.append("\n## Alerts\n")
    entries = {t.id: text(t.symptom) for t in c.troubleshooting}
    rows = []
    for rule in mon.alerts(c):
        entry = rule["annotations"].get("troubleshooting")
        link = f"[{entries[entry]}](troubleshooting.md#{entry})" if entry in entries else "–"
        rows.append([f"**{rule['alert']}**", rule["labels"].get("tier", "–"), rule["annotations"]["summary"],
                     rule["for"], link])
    out.append(table(["alert", "tier", "when", "for", "troubleshooting"], rows))
    for tier, partners in mon.waits_beside(c).items():
        which = "one of them serves" if len(partners) > 1 else "that tier serves"
        out.append(f"\nThe plan says {text(tier)} cannot run at the same time as {', '.join(map(text, partners))}: "
                   f"it waits in SLURM's queue while {which}, so its TierDown, EndpointMissing and TierPending stay "
                   "quiet then, and fire when neither answers.\n")
    out.append("\nTheir expressions:\n")
    out.append(code("\n".join(f"# {r['alert']}{' (' + r['labels']['tier'] + ')' if 'tier' in r['labels'] else ''}"
                               f"\n{r['expr']}" for r in mon.alerts(c)), "text"))
    if any(isinstance(t, RouterTier) for t in c.tiers):
        out.append('\n!!! note "Router mode"\n    A router-mode tier serves metrics per loaded model, so one with '
                   "nothing loaded has no scrape target up without being down: its TierDown reads the probe's "
                   "`/health` instead.\n")
    out.append("\n## The targets as PromQL\n")
    queries = []
    for t in c.tiers:
        queries.append(f"# {t.name}: decode tok/s over the last 5 minutes\n{mon.DECODE.format(job=mon.job(t))}")
        queries.append(f"# {t.name}: requests being processed\nllamacpp:requests_processing{{job=\"{mon.job(t)}\"}}")
        queries.append(f"# {t.name}: time to first token, s (the probe's one-token completion)\n"
                       f"clusterbook_tier_ttft_seconds{{tier=\"{t.name}\"}}")
    queries.append(f"# GPU memory in GiB, per node and GPU\n{mon.GPU_METRICS}_memory_used_bytes / 2^30")
    out.append(code("\n\n".join(queries), "text"))
    return "\n".join(out)
