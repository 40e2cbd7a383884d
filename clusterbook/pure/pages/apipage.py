"""The API page and the home page's quick start: base URLs, endpoints, each kind's examples (its module's), what a
client meets during a recovery, and the errors it can get."""

from __future__ import annotations

import json

from clusterbook.model.schema import Cluster, RpcTier, Tier
from clusterbook.pure import kinds
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.mdtext import text
from clusterbook.pure.pages.chatapi import example_request
from clusterbook.pure.pages.markdown import code, slot_context, table, tabs
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.loadtime import (
    BUSY_RETRY_AFTER_S,
    admitted,
    cold_start_at_most_s,
    cold_start_s,
    hold_s,
    new_job_hold_s,
    predict_load,
    wait_cap_s,
    whole_s,
)
from clusterbook.pure.planner.prompt import prompt_lengths, prompt_time
from clusterbook.pure.planner.residency import exclusion_text, plan_residency
from clusterbook.pure.rehearsed import compared, same_settings
from clusterbook.pure.render.node_config import HOLD_MAX_LOST


def tier_summary(c: Cluster) -> str:
    rows = []
    for t in c.tiers:
        nodes = ", ".join(t.nodes)
        what = ", ".join(t.served_models)
        kind = kinds.of(t).what
        manager = "SLURM job" if t.manager == "slurm" else "systemd"
        rows.append([f"**{t.name}**", f"`{topo.client_url(c, t)}`", f"{kind}, {manager}", what, nodes])
    # the key column second: a phone shows the first two without scrolling the table
    out = table(["tier", "URL (the [API page](api.md) has the others)", "how", "models", "nodes"], rows)
    for sentence in exclusion_text(plan_residency(c, plan_cluster(c))):
        out += f'\n!!! warning "Not at the same time"\n    {sentence} See the [capacity plan](capacity.md).\n'
    return out


def quick_start(c: Cluster) -> str:
    parts = []
    for t in c.tiers:
        parts.append(f"**{t.name}** — {text(t.description or t.kind)}\n\n{kinds.of(t).examples(c, t, None)['curl']}")
    return "\n".join(parts)


def _base_urls(c: Cluster, t: Tier) -> list[list[str]]:
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
        if t.router_mode:
            most = f"at most {t.models_max} at once" if t.models_max else "no limit on how many at once"
            out.append(f"\nRouter mode: a model loads on its first request ({most}); "
                       "`GET /v1/models` shows which are loaded. A model id the tier does not serve gets an error "
                       "naming it (see Troubleshooting, \"model not found\").\n")
        out.append("\n**Endpoints**\n")
        path, what = kinds.of(t).endpoint
        rows = [["`POST`", f"`{base}{path}`", what],
                ["`GET`", f"`{base}/v1/models`", "models this tier serves" + (" (and their load state)"
                                                                              if t.router_mode else "")],
                ["`GET`", f"`{base}/health`", "200 when ready, 503 while loading; never needs the API key"]]
        if not t.router_mode:  # router mode answers /metrics per model only
            rows.append(["`GET`", f"`{base}/metrics`", "Prometheus metrics (`--metrics` is on)"])
        out.append(table(["method", "URL", "what"], rows))
        if t.api_key:
            out.append("\nRequests need `Authorization: Bearer <key>`; without it the tier answers 401. The key "
                       f"is in {example_request(c, t)[3]}.\n")
        load = predict_load(c, t, plans[t.name])
        recovery = load.recovery_s if t.workers or t.manager == "slurm" else None
        out.append("\n**Examples**\n")
        out.append(tabs(kinds.of(t).examples(c, t, recovery)))
        if t.workers:
            out.append(prompt_section(c, t, plans[t.name]))
        reasoning = [m for m in t.served_models if c.model(m).reasoning_content]
        if reasoning:
            out.append(f'\n!!! tip "Reasoning models"\n    {", ".join(reasoning)} returns its chain of thought in '
                       "`choices[0].message.reasoning_content` (streamed as `delta.reasoning_content`) and the answer "
                       "in `content`. The chain of thought comes first: give `max_tokens` room for both (500 or "
                       "more), or the answer is cut off before it starts.\n")
        if recovery is not None:
            cause = "a worker crash" if t.workers else "a crash of its server"
            seconds = whole_s(recovery)
            preempted = ("" if load.new_job_recovery_s is None else "; after a preemption it waits until SLURM "
                         f"gives its GPUs back, and is back about {whole_s(load.new_job_recovery_s)} s after that")
            routed = c.gateway and any(r.tier == t.name for r in c.gateway.routes)
            if routed:
                hold = hold_s(c, t, plans[t.name])
                after = new_job_hold_s(c, t, plans[t.name]) if load.new_job_recovery_s is not None else None
                seen = (f"through the gateway a request waits instead: one in flight that got no answer yet is sent "
                        f"again once the tier is back, in the order the requests came, and every new one is held "
                        f"until then, at most {hold} s from the tier's failure "
                        + (f"({after} s after a preemption ends) " if after else "")
                        + f"(the prediction and `gateway.hold_margin_s`), then answered: the client sees latency, not "
                        f"an error. Past {hold} s it gets `503` with `Retry-After: {seconds}` and a JSON "
                        "`unavailable_error`. A stream cut in the middle goes on: the gateway holds it likewise and "
                        "continues it from the text already sent (an assistant prefill for a chat, with the "
                        "`reasoning_content` a thinking model streamed so far: it thinks on where it stopped; the "
                        "prompt extended for a completion), with SSE comments (`: clusterbook: …`) saying so; past "
                        "the hold it ends with an error event, never silently. A stream whose request offers tools, "
                        "asks for a `response_format`, a grammar or several choices, or has content parts or tool "
                        "calls in its messages cannot be continued correctly: cut after its first delta, it ends with "
                        "one error event saying why, never sent again from its start. A request the tier failed "
                        f"{HOLD_MAX_LOST} times while answering it is not sent again (`500`, or an error event): it "
                        "may be what fails the tier")
            else:
                seen = ("requests in flight end without an answer (a stream stops without an error event), new ones "
                        "are refused, or get `503` \"Loading model\" while it loads. Retry with a backoff for that "
                        "long (the `openai` client retries a 503 only twice by default: the Python examples raise its "
                        "`max_retries`)")
            head = (f" (after a crash of the head alone about {whole_s(load.head_recovery_s)} s: its workers keep "
                    "their shares)" if load.kept else "")
            out.append(f'\n!!! note "During a recovery"\n    After {cause} the tier is gone for about '
                       f"{seconds} s{head} (the capacity plan's prediction){preempted}: {seen}; `/health` answers "
                       "200 again when the tier is back.\n")
            if routed:
                out.append(f'\n!!! note "During a change, and past the queue"\n    While `invoke apply` or '
                           f"`invoke rollback` changes {t.name} (a change that fails is rolled back by itself), "
                           f"the gateway holds its requests until the change is over, at most {t.timeout_s:,} s "
                           f"(`timeout_s`). {admitted(c, t)} requests may be in {t.name}'s slots and queue at once "
                           f"(`gateway.queue_per_slot`); the next gets `429` with `Retry-After: "
                           f"{BUSY_RETRY_AFTER_S}` at once. A request body over {c.gateway.body_max_mib} MiB "
                           "(`gateway.body_max_mib`) gets `413` from the gateway; while it holds "
                           f"{c.gateway.hold_in_flight_max} requests (`gateway.hold_in_flight_max`) the next gets "
                           "`503` with `Retry-After: 1`. What clients measured through each fault: "
                           "`invoke bench.faults` (the Results page).\n")
        if t.on_demand:
            out.append(on_demand_note(c, t, plans[t.name]))
    if c.gateway:
        out.append(error_table(c))
    out.append(tailnet_access(c))
    return "\n".join(out)


def prompt_section(c: Cluster, t: RpcTier, plan: TierPlan) -> str:
    """How long an RPC tier reads a prompt before its first token: the planner's estimate on this cluster's cards,
    beside the prompts rehearsed at full size with the tier's settings on other cards (and the planner's for those)."""
    cards = sorted({d.gpu for d in plan.devices if d.gpu}) or ["its CPUs"]
    rehearsed = {x.rehearsal.prompt_tokens: x for x in compared(c, t.name)
                 if x.rehearsal.what == "prompt_s" and same_settings(t, x.rehearsal.settings)}
    rows = []
    for n in prompt_lengths(t):
        estimate, x = prompt_time(c, t, n, plan=plan), rehearsed.get(n)
        rows.append([f"{n:,}", "–" if estimate is None else f"{estimate.seconds:,.1f} s",
                     "–" if x is None else f"{x.rehearsal.value:,.1f} s",
                     "–" if x is None or x.planned is None else f"{x.planned:,.1f} s",
                     "–" if x is None or x.ratio is None else f"{x.ratio:.2f}"])
    head = ["prompt (tokens)", f"planned on {text(', '.join(cards))}", "rehearsed at full size",
            "planned for that card", "rehearsed / planned"]
    if not rehearsed:  # nothing rehearsed with these settings: the plan alone
        head, rows = head[:2], [r[:2] for r in rows]
    out = [f"\n**How long a prompt takes** before the first token (flash attention {t.flash_attn}, ubatch "
           f"{t.ubatch_size}):\n", table(head, rows)]
    where = {(x.rehearsal.card, x.rehearsal.source, x.rehearsal.date) for x in rehearsed.values()}
    out.append("\nPlanned: the planner's estimate for the server's prompt time, ubatch after ubatch (the weights' "
               "products, the attention over the cache so far, the hops between devices), at the planner's measured "
               "shares of each card's declared bandwidth and tensor rate, with a GPU for each process (a rehearsal "
               "with "
               "head and worker sharing one GPU takes longer). A client that switches conversations also "
               "waits for the server to save the previous one's cache (llama-server's prompt cache: seconds at 16K)."
               + "".join(f" Rehearsed: {text(card)} ({text(source)}, {text(date)})." for card, source, date in
                         sorted(where))
               + f" Measured on {text(c.cluster.name)} itself: `invoke bench --tier {t.name}` (its context sweep "
               "has these lengths, each beside this estimate: the Results page).\n")
    return "\n".join(out)


def on_demand_note(c: Cluster, t: Tier, plan: TierPlan) -> str:
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



def error_table(c: Cluster) -> str:
    """What the gateway answers besides a tier's own answer, and the client's next step for each (issue 67): every
    figure from the file or the planner, as the gateway uses it."""
    gw, plans = c.gateway, plan_cluster(c)
    routed = [c.tier(r.tier) for r in gw.routes]
    retry = ", ".join(f"{t.name} {whole_s(predict_load(c, t, plans[t.name]).recovery_s)} s" for t in routed)
    rows = [
        ["`400` `invalid_request_error`", "the body is nested too deeply, its `Content-Length` is not a number, or it "
         "ended before it", "fix the request; sending it again as it is gets the same answer"],
        ["`411`", "a body without `Content-Length` (chunked)", "send the body with its length (every OpenAI client "
         "does)"],
        ["`413` `invalid_request_error`", f"the body is over the gateway's limit of {gw.body_max_mib} MiB "
         "(`gateway.body_max_mib`)", "shorten the prompt; the largest context is well under it"],
        ["`429` `rate_limit_error`", "the tier's slots and queue are full (`gateway.queue_per_slot`)",
         f"retry after `Retry-After` ({BUSY_RETRY_AFTER_S} s)"],
        [f"`500` `server_error` (\"failed {HOLD_MAX_LOST} times while answering this request\")",
         f"the tier went away {HOLD_MAX_LOST} times while it had this very request",
         "do not send it again unchanged: it may be what fails the tier; tell the cluster's owner"],
        ["`503` `unavailable_error`", f"the tier is recovering past its hold, stopped, waiting for its GPUs (other "
         f"jobs hold them: the message names them and SLURM's estimate), or the gateway holds "
         f"{gw.hold_in_flight_max} requests already", f"retry after `Retry-After` (a recovery: {retry}; waiting "
         "for GPUs: SLURM's estimate)"],
        ["an `error` event, then `[DONE]`, in a stream", "the stream was cut and cannot be continued correctly (its "
         "request has tools, a format, several choices or content parts), or its tier stayed away past the hold",
         "what arrived before it is valid; send the request again for the rest"],
    ]
    return ("\n## When the gateway answers for the tier\n\nBesides each tier's own answers (its `400` for a bad "
            "request, `401` without its key), the gateway may answer, in the tiers' JSON error format:\n\n"
            + table(["answer", "why", "the client's next step"], rows) + "\n")
