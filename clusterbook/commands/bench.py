"""Benchmarks: a live tier over HTTP, a local rehearsal of a tier, and the tuning grid."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from clusterbook.commands.arguments import tier_named
from clusterbook.commands.reportstamp import stamped
from clusterbook.commands.settings import Settings
from clusterbook.effects.benchmark import (
    PARALLEL_GAIN,
    baseline_decode_samples,
    concurrency_point,
    decode_samples,
    markdown,
    run_bench,
)
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.fabric import measure
from clusterbook.effects.faults import (
    ADDED_P99_MARGIN_S,
    CONTROL,
    NEW_JOB_FAULTS,
    OVERLOAD_EXTRA,
    faults_for,
    run_fault,
    run_overload,
)
from clusterbook.effects.probes import api_key
from clusterbook.effects.recovery import PAGE_CACHE, run_case
from clusterbook.effects.rehearsal import Rehearsal, gpu_assignment, head_first_gpu, localize
from clusterbook.effects.splitcost import SplitCost, engine_decode, fits_one_device, served_decode
from clusterbook.effects.splitcost import markdown as split_markdown
from clusterbook.effects.tuning import change_to_make
from clusterbook.effects.tuning import tune as run_tune
from clusterbook.model.loader import load_cluster
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner import reach
from clusterbook.pure.planner.capacity import GIB
from clusterbook.pure.planner.loadtime import (
    admitted,
    cold_start_s,
    hold_s,
    load_json,
    new_job_hold_s,
    predict_load,
    wait_cap_s,
)
from clusterbook.pure.planner.prompt import prompt_lengths, prompt_time
from clusterbook.pure.planner.shape import shape_of
from clusterbook.pure.recoverylog import ordered


def write_report(s: Settings, name: str, data: dict, markdown: str, cluster, cluster_file: str) -> None:
    """reports/NAME.json and reports/NAME-summary.md, the summary stamped with the cluster file it measured."""

    reports = s.reports
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"{name}.json").write_text(json.dumps(data, indent=2))
    (reports / f"{name}-summary.md").write_text(stamped(markdown, cluster.cluster.name, cluster_file))
    console.print(f"[dim]written: {reports}/{name}.json, {reports}/{name}-summary.md[/]")


def _write_bench(s: Settings, report, cluster, cluster_file: str, card: str, extra: dict | None = None,
                 extra_markdown: str = "") -> None:

    reports = s.reports
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "bench.json").write_text(json.dumps({**report.to_json(), "card": card, **(extra or {})}, indent=2))
    text = markdown(report, card) + extra_markdown
    (reports / "bench-summary.md").write_text(stamped(text, cluster.cluster.name, cluster_file))
    console.print(text, markup=False)
    console.print(f"[dim]written: {reports}/bench.json, {reports}/bench-summary.md[/]")


def _card() -> str:
    if not shutil.which("nvidia-smi"):
        return "CPU only"
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
    return f"{len(names)} x {names[0]}" if names else "unknown GPU"


def _bench_tier(cluster, tier_name: str | None):
    tiers = [tier_named(cluster, tier_name)] if tier_name else list(cluster.tiers)
    rpc = [t for t in tiers if t.workers]
    return (rpc or tiers)[0]


def _prompt_options(cluster, tier, plan, quick: bool) -> dict:
    """An RPC tier's context sweep: the API page's prompt lengths (where they leave room for the answer), each
    beside the planner's estimate."""
    if not tier.workers:
        return {}

    def planned(tokens: int) -> float | None:
        estimate = prompt_time(cluster, tier, tokens, plan=plan)
        return estimate.seconds if estimate else None

    if quick:
        return {"planned_prompt_s": planned}
    room = tier.ctx_size - 128 - 64  # the sweep's answer and the chat template
    return {"planned_prompt_s": planned,
            "contexts": tuple(sorted({256, 1024, *(min(n, room) for n in prompt_lengths(tier))}))}


def bench(s: Settings, cluster_file: str, tier_name: str | None, quick: bool) -> None:
    """Measure a live tier over its HTTP API, beside the planner's bound."""

    cluster = load_cluster(cluster_file)
    tier = _bench_tier(cluster, tier_name)
    model = tier.served_models[0]
    key = api_key(connect(cluster), cluster, tier)
    plan = plan_tier(cluster, tier)
    options = {"repeats": 1, "tokens": 32, "clients": (1, 2), "contexts": (128,)} if quick else {}
    options |= _prompt_options(cluster, tier, plan, quick)
    with console.status("bench …") as status:
        report = run_bench(topo.endpoint_url(cluster, tier), model, key, tier.name, plan.decode_bound_tps,
                           max_context=tier.ctx_size, progress=status.update, **options)
    _write_bench(s, report, cluster, cluster_file, "")


def rehearse(s: Settings, cluster_file: str, tier_name: str | None, install_dir: str | None, models_dir: str | None,
             quick: bool) -> None:
    """Run the tier's rendered command lines on this machine (one RPC worker per GPU, head on GPU 0), bench it,
    and measure what the split costs against the model on the head's first device alone."""

    cluster = localize(load_cluster(cluster_file), install_dir, models_dir)
    tier = _bench_tier(cluster, tier_name)
    shape = shape_of(cluster.model(tier.model), Path(cluster.storage.models_dir))
    plan = plan_tier(cluster, tier, shape)
    one_fits = fits_one_device(plan, tier.head)
    options = {"repeats": 1, "tokens": 32, "clients": (1, 2), "contexts": (128,)} if quick else {}
    options |= _prompt_options(cluster, tier, plan, quick)
    reps, tokens = (1, 32) if quick else (3, 128)
    logs, url = s.reports / "rehearsal", topo.endpoint_url(cluster, tier)
    head_gpus = gpu_assignment(cluster, tier).get(tier.head, "")
    with console.status(f"starting {tier.name}'s RPC workers for llama-bench …") as status:
        with Rehearsal(cluster, tier, logs, with_head=False):
            status.update("llama-bench over the RPC workers, the tier's flags …")
            engine_tier = engine_decode(cluster, tier, head_gpus, one_device=False, reps=reps, tokens=tokens)
        engine_one = None
        if one_fits:
            status.update("llama-bench on the head's first device alone …")
            engine_one = engine_decode(cluster, tier, head_first_gpu(cluster, tier), one_device=True, reps=reps,
                                       tokens=tokens)
        status.update(f"starting {tier.name}: workers, then the head …")
        with Rehearsal(cluster, tier, logs):
            _record_gpu_memory(s, cluster, tier, shape)
            status.update("bench …")
            report = run_bench(url, tier.model, None, tier.name, plan.decode_bound_tps,
                               max_context=tier.ctx_size, progress=status.update, **options)
        served_one = None
        if one_fits:
            status.update("llama-server on the head's first device alone …")
            with Rehearsal(cluster, tier, logs, one_device=True):
                served_one = served_decode(decode_samples(url, tier.model, None, tokens, reps))
    cost = SplitCost(engine_tier, engine_one, served_decode(baseline_decode_samples(report)), served_one, tokens)
    _write_bench(s, report, cluster, cluster_file, _card() + " (rehearsal)", {"split_cost": cost.to_json()},
                 split_markdown(cost, len(plan.devices)))


def _record_gpu_memory(s: Settings, cluster, tier, shape) -> None:
    """With GPUs: memory used per GPU once the tier is up, next to the plan's total for that device."""

    if not shutil.which("nvidia-smi"):
        return
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    used = {int(i): int(m) * 2**20 for i, m in (line.split(",") for line in out.strip().splitlines())}
    gpus = gpu_assignment(cluster, tier)
    rows = []
    for device in plan_tier(cluster, tier, shape).devices:
        index = int(gpus[device.node].split(",")[0])
        rows.append({"device": device.device, "node": device.node, "gpu": index, "planned": device.total,
                     "used": used[index], "ratio": round(device.total / used[index], 3)})
    s.reports.mkdir(parents=True, exist_ok=True)
    (s.reports / "rehearsal-gpu-memory.json").write_text(json.dumps(rows, indent=2))
    for r in rows:
        console.print(f"{r['device']} (GPU {r['gpu']}): planned {r['planned'] / GIB:.2f} GiB, "
                      f"nvidia-smi {r['used'] / GIB:.2f} GiB, ratio {r['ratio']}")


def parallel_sweep(s: Settings, cluster, tier, parallels: tuple[int, ...], tokens: int = 64) -> list[dict]:
    """The live server with each parallel slot count, as many clients as slots: aggregate throughput."""

    points = []
    for n in parallels:
        with console.status(f"server with --parallel {n}, {n} client(s) …"):
            with Rehearsal(cluster, tier.model_copy(update={"parallel": n}), s.reports / "rehearsal"):
                url = topo.endpoint_url(cluster, tier)
                concurrency_point(url, tier.model, None, 1, 8)  # warm up
                points.append({"parallel": n, **concurrency_point(url, tier.model, None, n, tokens)})
    return points


def tune(s: Settings, cluster_file: str, tier_name: str | None, install_dir: str | None, models_dir: str | None,
         parallels: tuple[int, ...] = (1, 2, 4), quick: bool = False) -> None:
    """Try the settings grid with llama-bench over the tier's RPC workers; print the best and the change to make
    (quick: one repetition of short runs, which checks the path on a machine and chooses nothing)."""
    cluster = localize(load_cluster(cluster_file), install_dir, models_dir)
    tier = _bench_tier(cluster, tier_name)
    head_gpus = gpu_assignment(cluster, tier).get(tier.head, "")
    with console.status("starting the RPC workers …") as status:
        with Rehearsal(cluster, tier, s.reports / "rehearsal", with_head=False):
            grid, best, again = run_tune(cluster, tier, head_gpus, progress=status.update, quick=quick)
    parallel = parallel_sweep(s, cluster, tier.model_copy(update=best.settings()), parallels, 16 if quick else 64)
    table = Table("flash attn", "K", "V", "ubatch", "batch", "decode tok/s", "prompt tok/s", title=f"tune {tier.name}")
    for p in sorted(grid, key=lambda p: -p.decode_tps):
        table.add_row("on" if p.flash_attn else "off", p.cache_k, p.cache_v, str(p.ubatch), str(p.batch),
                      f"{p.decode_tps:.1f}", f"{p.prompt_tps:.0f}")
    console.print(table)
    ptable = Table("parallel", "clients", "aggregate tok/s", "per client tok/s", "TTFT s", title="parallel slots")
    for p in parallel:
        ptable.add_row(str(p["parallel"]), str(p["clients"]), str(p["aggregate_tps"]), str(p["per_client_tps"]),
                       str(p["ttft_s"]))
    console.print(ptable)
    one = next(p for p in parallel if p["parallel"] == parallels[0])["aggregate_tps"]
    best_parallel = max(parallel, key=lambda p: p["aggregate_tps"])
    chosen = best_parallel["parallel"] if best_parallel["aggregate_tps"] >= PARALLEL_GAIN * one else parallels[0]
    changes = change_to_make(tier, best)
    if chosen != tier.parallel:
        changes.append(f"parallel: {chosen}   # was {tier.parallel}; aggregate {best_parallel['aggregate_tps']} "
                       f"tok/s against {one} with one slot")
    console.print(f"best: {best.settings()} at {best.decode_tps:.1f} tok/s; measured again: {again.decode_tps:.1f} "
                  f"tok/s ({again.decode_tps / best.decode_tps:.1%} of the grid's best)")
    if quick:
        console.print("[yellow]quick: one repetition of short runs, too few to choose settings by; the change below "
                      "only shows the path (run bench.tune without --quick to choose)[/]")
    console.print("change in the cluster file, tier " + tier.name + ":\n  " + "\n  ".join(changes) if changes
                  else "the cluster file already has the best settings")
    s.reports.mkdir(parents=True, exist_ok=True)
    (s.reports / "tune.json").write_text(json.dumps({
        "card": _card(), "tier": tier.name, "grid": [p.__dict__ for p in grid], "best": best.__dict__,
        "again": again.__dict__, "parallel": parallel, "change": changes, "quick": quick}, indent=2))


def _tier_card(cluster, tier) -> str:
    """The devices a tier runs on, from the cluster file: its GPUs by name, or its CPUs."""
    gpus = [g for node in tier.nodes for g in cluster.node(node).gpus]
    if not gpus:
        return f"CPU only ({len(tier.nodes)} nodes)"
    names = sorted({g.model for g in gpus})
    return f"{sum(g.count for g in gpus)} x {' + '.join(names)}"


def recovery(s: Settings, cluster_file: str, tier_name: str | None, cases: tuple[str, ...], runs: int,
             cold: bool) -> None:
    """Disrupt a live RPC tier run by run; time each phase until it answers again, beside the planner's prediction."""


    cluster = load_cluster(cluster_file)
    tier = _bench_tier(cluster, tier_name)
    if not tier.workers:
        raise Failed(f"tier {tier.name} has no RPC workers: bench.recovery disrupts an RPC tier")
    transport = connect(cluster)
    predicted = load_json(cluster, tier, plan_tier(cluster, tier))
    predicted_load = predict_load(cluster, tier, plan_tier(cluster, tier)).load_s  # unrounded, for the ratio
    target = cluster.recovery_level(tier.name).target
    limit = max(3 * target, 3 * predicted["recovery_s"], 3 * predicted.get("new_job_recovery_s", 0), 60)
    card = _tier_card(cluster, tier)
    results = []
    caches = PAGE_CACHE if cold else PAGE_CACHE[:1]
    for case in cases:
        for cache in caches:
            for n in range(1, runs + 1):
                label = f"{case}, page cache {cache}, run {n}/{runs}"
                with console.status(f"{label} …") as status:
                    run = run_case(cluster, transport, tier, case, cache, limit,
                                   progress=lambda text, label=label: status.update(f"{label}: {text}"))
                results.append(run)
                steps = ", ".join(f"{name} {seconds:g} s" for name, seconds in ordered(run.phases))
                console.print(f"[bold]{label}[/]: " + (f"[red]{escape(run.error)}[/]" if run.error else steps))
    rows = []
    for case in cases:
        for cache in caches:
            group = [r for r in results if r.case == case and r.page_cache == cache and not r.error]
            answered = [r.answered_s for r in group]
            loads = [r.load_s for r in group if r.load_s is not None]
            rows.append({"case": case, "page_cache": cache, "runs": len(group),
                         "answered_s": statistics.median(answered) if answered else None,
                         "load_s": statistics.median(loads) if loads else None})
    table = Table(title=f"{tier.name}: recovery on {card} (medians)")
    for column in ("disruption", "page cache", "runs", "back after", "load", "predicted load", "ratio"):
        table.add_column(column)
    lines = [f"Recovery of tier **{tier.name}** on {card}, measured by `invoke bench.recovery`: seconds from the "
             "disruption until a chat completion is answered, and the load itself (the head's own log, from "
             "\"loading model\" to \"model loaded\"). Predicted by the planner: "
             f"load {predicted_load:.3g} s, back after a worker crash in {predicted['recovery_s']:g} s "
             f"({predicted['restart']} {predicted['restart_s']:g} s included)" +
             (f"; target {target:g} s." if target else "."), "",
             "| disruption | page cache | runs | back after (median) | load (median) | load measured / predicted |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{row['load_s'] / predicted_load:.2f}" if row["load_s"] and predicted_load else "—"
        back = f"{row['answered_s']:g} s" if row["answered_s"] is not None else "did not answer"
        load = f"{row['load_s']:g} s" if row["load_s"] is not None else "—"
        table.add_row(row["case"], row["page_cache"], str(row["runs"]), back, load, f"{predicted_load:.3g} s",
                      ratio)
        lines.append(f"| {row['case']} | {row['page_cache']} | {row['runs']} | {back} | {load} | {ratio} |")
    lines += ["", "Phases of each run (seconds after the disruption):", ""]
    for r in results:
        lines.append(f"- {r.case}, page cache {r.page_cache}: " + (r.error or ", ".join(
            f"{name} {seconds:g}" for name, seconds in ordered(r.phases))) +
            f" (clients saw: {', '.join(f'{k} ×{v}' for k, v in r.clients_saw.items())}" +
            (f"; {r.resident_after_eviction:.0%} of the file resident after eviction"
             if r.resident_after_eviction is not None else "") + ")")
    console.print(table)
    write_report(s, "bench-recovery", {"tier": tier.name, "card": card, "predicted": predicted, "target_s": target,
                                    "summary": rows, "runs": [r.to_json() for r in results]},
                 "\n".join(lines) + "\n", cluster, cluster_file)
    failed = [r for r in results if r.error]
    if failed:
        raise Failed(f"{len(failed)} of {len(results)} runs did not recover: {failed[0].error}")


def faults(s: Settings, cluster_file: str, tier_name: str | None, names: tuple[str, ...], clients: int | None) -> None:
    """Clients through the gateway while each fault is done to a live tier in turn: failed requests, resumed
    streams and the latency they saw, beside the planner's recovery and the hold's bound; reports/bench-faults*."""
    cluster = load_cluster(cluster_file)
    tier = _bench_tier(cluster, tier_name)
    if not cluster.gateway or not any(r.tier == tier.name for r in cluster.gateway.routes):
        raise Failed(f"tier {tier.name} has no gateway route: bench.faults measures what the gateway's clients see")
    known = faults_for(cluster, tier)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise Failed(f"--fault: {', '.join(unknown)}: tier {tier.name} can be given {', '.join(known)}")
    plan = plan_tier(cluster, tier)
    predicted = load_json(cluster, tier, plan)
    bound = {"hold_s": hold_s(cluster, tier, plan), "new_job_hold_s": new_job_hold_s(cluster, tier, plan)}
    if tier.on_demand:  # a released tier's first requests wait for its cold start, at most the wake's cap
        predicted["cold_start_s"] = round(cold_start_s(cluster, tier, plan), 1)
        bound["wake_cap_s"] = wait_cap_s(cluster, tier, plan)
    clients = clients or min(20, admitted(cluster, tier))  # more would be told 429 (too many) by design
    transport = connect(cluster)
    key = api_key(transport, cluster, tier)
    url = topo.client_url(cluster, tier) + "/v1/chat/completions"
    limit = 2 * max(bound["hold_s"], bound["new_job_hold_s"] or 0, bound.get("wake_cap_s", 0)) + 30
    runs, overload = [], None
    for name in names or known:
        if name == "overload":
            with console.status(f"overload: {admitted(cluster, tier) + OVERLOAD_EXTRA} requests at once …"):
                overload = run_overload(url, key, admitted(cluster, tier), OVERLOAD_EXTRA, tier.served_models[0],
                                        limit + 60)
            continue
        with console.status(f"{name}: {clients} clients …") as status:
            runs.append(run_fault(cluster, transport, tier, name, url, key, clients, limit, progress=status.update,
                                  model=tier.served_models[0]))
    table = Table(title=f"{tier.name}: faults through the gateway, {clients} clients (half streaming)")
    for column in ("fault", "sent", "failed", "resumed", "back", "p99 base/during", "added p99", "predicted",
                   "met"):
        table.add_column(column)
    lines = [f"Faults done to tier **{tier.name}** while {clients} clients (every second one streaming) sent chat "
             f"completions through the gateway, measured by `invoke bench.faults`. A failed request is any answer "
             "but 200, or a stream without its end. Latency: answered requests' seconds; baseline: ended before the "
             "fault or sent once the tier was back; during: in flight at the fault or sent before the tier was back. "
             f"The control ({CONTROL}) does nothing: its added p99 is what the figures vary by alone. "
             "Predicted by the planner: back in "
             f"{predicted['recovery_s']:g} s after a crash inside the job or unit"
             + (f", {predicted['new_job_recovery_s']:g} s where a new job starts" if "new_job_recovery_s" in predicted
                else "") + f"; the gateway holds a request at most {bound['hold_s']} s"
             + (f" ({bound['new_job_hold_s']} s while a new job starts)" if bound["new_job_hold_s"] else "")
             + (f"; a released tier on demand starts in {predicted['cold_start_s']:g} s, its requests held at most "
                f"{bound['wake_cap_s']} s." if tier.on_demand else "."), "",
             f"The target: no request fails, and the fault adds at most the predicted recovery and "
             f"{ADDED_P99_MARGIN_S:g} s to the slowest answers (p99).", "",
             "| fault | requests | failed | streams resumed | back after | p50 / p99 baseline | p50 / p99 during | "
             "added p99 | predicted back | target met |", "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        before, during = run.latency(False), run.latency(True)
        back = f"{run.back_s:g} s" if run.back_s is not None else "not back"
        expect, held = ((0.0, bound["hold_s"]) if run.fault == CONTROL else
                        (predicted["cold_start_s"], bound["wake_cap_s"]) if run.fault == "released" else
                        (predicted.get("new_job_recovery_s"), bound["new_job_hold_s"]) if run.fault in NEW_JOB_FAULTS
                        else (predicted["recovery_s"], bound["hold_s"]))
        added = run.added_p99_s()
        row = [run.fault, str(len(run.requests)), str(len(run.failed)), str(sum(r.resumed for r in run.requests)),
               back, f"{before['p50']}/{before['p99']} s", f"{during['p50']}/{during['p99']} s",
               "—" if added is None else f"{added:g} s", f"{expect:g} s (hold {held} s)",
               "(control)" if run.fault == CONTROL else run.target_met(expect)]
        table.add_row(*[escape(cell) for cell in row[:5] + [f"{before['p99']}/{during['p99']} s"] + row[7:]])
        lines.append("| " + " | ".join(row) + " |")
    if runs:
        console.print(table)
    if overload:
        o = overload.to_json()
        said = (f"Overload: {o['sent']} requests at once to a tier that admits {o['admitted']} (its slots and "
                f"queue): {o['refused']} told 429 with Retry-After; nginx refused them in p99 "
                f"{_ms(o['gateway_ms']['p99'])} (slowest {_ms(o['gateway_ms']['max'])}, its $request_time; the target "
                "is 50 ms), the clients "
                f"saw p50 {o['refused_ms']['p50']} ms, p99 {o['refused_ms']['p99']} ms (slowest "
                f"{o['refused_ms']['max']} ms, {o['sent']} threads of this machine); "
                + (f"{len(o['failed'])} failed: {', '.join(o['failed'][:3])}." if o["failed"] else
                   "every other one answered."))
        console.print(escape(said))
        lines += ["", said]
    write_report(s, "bench-faults", {"tier": tier.name, "card": _tier_card(cluster, tier), "clients": clients,
                                     "predicted": predicted, "bounds": bound, "runs": [r.to_json() for r in runs],
                                     **({"overload": overload.to_json()} if overload else {})},
                 "\n".join(lines) + "\n", cluster, cluster_file)
    if overload and overload.failed:
        raise Failed(f"overload: {len(overload.failed)} requests failed: {', '.join(overload.failed[:5])}")
    failed = [(run.fault, r) for run in runs for r in run.failed]
    if failed:
        raise Failed(f"{len(failed)} requests failed: " + "; ".join(
            f"{fault}: {r.outcome} (sent {r.sent_s:.2f} s after the fault)" for fault, r in failed[:5]))


def _ms(value: float | None) -> str:
    """nginx's time, to its millisecond: 0 is under one."""
    return "not told" if value is None else "under 1 ms" if value < 1 else f"{value:g} ms"


def fabric(s: Settings, cluster_file: str, tier_name: str | None, seconds: int) -> None:
    """iperf3 from each RPC tier's head to its workers over the RPC network, beside the tier's fabric_gbps target and
    the network's declared bandwidth; reports/fabric-summary.md (on the Results page)."""


    cluster = load_cluster(cluster_file)
    tiers = [t for t in cluster.tiers if t.workers and tier_name in (None, t.name)]
    if not tiers:
        raise Failed(f"no RPC tier{' named ' + tier_name if tier_name else ''} in {cluster_file}: the fabric carries "
                     "RPC traffic between a head and its workers")
    transport = connect(cluster)
    network = cluster.networks[cluster.rpc_network]
    links, verdicts = [], []
    for tier in tiers:
        with console.status(f"iperf3 {tier.head} -> {', '.join(tier.workers)} ({seconds} s each) …"):
            try:
                measured = measure(cluster, transport, tier, seconds)
            except RuntimeError as exc:
                raise Failed(str(exc)) from None
        judged = reach.judged_fabric(cluster, tier)  # the file's levels, lowered to what the plan reaches
        asked = cluster.targets_for(tier.name).fabric_gbps if judged else None
        scale = judged.target / asked.target if judged and asked.target else 1
        level = asked.model_copy(update={"target": judged.target, "acceptable": asked.acceptable * scale,
                                         "critical": asked.critical * scale}) if judged else None
        for link in measured:
            verdict = "—" if not level else ("meets the target" if link.gbps >= level.target else
                                             "acceptable" if link.gbps >= level.acceptable else
                                             "below acceptable" if link.gbps >= level.critical else "critical")
            links.append(link)
            verdicts.append((link, level, verdict))
    table = Table(title=f"fabric: {cluster.rpc_network} ({network.link}, declared {network.bandwidth_gbps:g} Gbit/s)")
    for column in ("tier", "head -> worker", "addresses", "Gbit/s", "retransmits", "target", "verdict"):
        table.add_column(column)
    lines = [f"TCP bandwidth over the {cluster.rpc_network} network ({network.link}, declared "
             f"{network.bandwidth_gbps:g} Gbit/s), measured by `invoke fabric` with iperf3 for {seconds} s from "
             "each RPC tier's head to each worker, bound to their RPC addresses.", "",
             "| tier | head → worker | Gbit/s | retransmits | target (acceptable, critical) | verdict |",
             "|---|---|---|---|---|---|"]
    for link, level, verdict in verdicts:
        goal = (f"≥ {level.target:.3g} ({level.acceptable:.3g}, {level.critical:.3g})" if level
                else "no fabric_gbps target")
        table.add_row(link.tier, f"{link.head} -> {link.worker}", f"{link.source} -> {link.target}",
                      f"{link.gbps:.2f}", str(link.retransmits), goal, verdict)
        lines.append(f"| {link.tier} | {link.head} → {link.worker} | {link.gbps:.2f} | {link.retransmits} | {goal} | "
                     f"{verdict} |")
    console.print(table)
    write_report(s, "fabric", {"network": cluster.rpc_network, "seconds": seconds,
                            "links": [link.to_json() for link in links]},
                 "\n".join(lines) + "\n", cluster, cluster_file)
    low = [f"{link.head} -> {link.worker} {link.gbps:.2f} Gbit/s (acceptable {level.acceptable:.3g})"
           for link, level, _ in verdicts if level and link.gbps < level.acceptable]
    if low:
        raise Failed("fabric below its acceptable bandwidth: " + "; ".join(low))
