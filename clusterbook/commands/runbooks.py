"""Commands that run runbooks over SSH: any runbook, a tier's by its manager, status and logs."""

from __future__ import annotations

import datetime
import json
import time as _time

from rich.markup import escape
from rich.table import Table

from clusterbook.commands.arguments import nodes_named, tier_named
from clusterbook.commands.preflight import judged, print_preflight
from clusterbook.commands.reportstamp import file_digest
from clusterbook.commands.settings import Settings
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console, waits
from clusterbook.effects.executor import Executor
from clusterbook.effects.probes import prometheus_alerts, prometheus_query
from clusterbook.effects.reporters import ConsoleReporter, RunLog, dry_run, recap, run_log_path, step_times
from clusterbook.effects.verified import state_dir
from clusterbook.model.loader import load_cluster
from clusterbook.pure import generations as gen
from clusterbook.pure import ownership
from clusterbook.pure.operations import operations, tier_operations, unavailable_reason
from clusterbook.pure.phases import engine_hosts, engine_link
from clusterbook.pure.preflight import facts_command
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.render.monitoring import GPU_METRICS, PROBE_TEXTFILE, job
from clusterbook.pure.runbooks import expand, runbook_named


def run_runbook(s: Settings, runbook_id: str, cluster_file: str, tier: str | None = None, dry: bool = False,
                only: str | None = None, part: str | None = None, quiet_recap: bool = False,
                variables: dict | None = None, extra_artifacts: list | None = None, preflight: bool = False):
    """Expand a runbook for the cluster and run it over SSH (or print the plan with dry); with preflight, the
    nodes it touches pass the preflight checks first."""


    cluster = load_cluster(cluster_file)
    only_nodes = nodes_named(cluster, only)
    # a tier's files are rendered when its steps upload them; all of them only with extra ones (the packed docs site)
    artifacts = render_artifacts(cluster) + extra_artifacts if extra_artifacts else None
    expansion = expand(runbook_named(runbook_id), cluster, tier, only_nodes, artifacts=artifacts,
                       variables=variables, part=part)
    deployed = state_dir(cluster) / "deployed"
    hosts = [n.name for n in cluster.nodes if any(n.name in step.hosts for step in expansion.steps)]
    if dry:
        if preflight and hosts:
            console.print(f"first: preflight of {', '.join(hosts)} (invoke preflight; skip with --no-preflight)")
        for host in (h for h in hosts if ownership.roots_on(cluster, h)):
            console.print(f"before its first change on {host}: clusterbook's folders there are claimed (created "
                          f"with its marker {ownership.MARKER}, or found with it): "
                          + ", ".join(ownership.roots_on(cluster, host)))
        console.print()
        dry_run(expansion, deployed)
        return None
    log = run_log_path(s.runs, cluster.cluster.name, runbook_id + (f"-{tier}" if tier else ""))
    started = _time.monotonic()
    recording = generation_recording(cluster, cluster_file, expansion) if expansion.generation else None
    executor = Executor(connect(cluster), deployed, [ConsoleReporter(), RunLog(log)], recording=recording,
                        claim=lambda host: ownership.claim_command(cluster, host))
    known = None
    if preflight and hosts:  # the preflight's facts travel in the look-ahead's round trip (both only read)
        with console.status(f"preflight of {', '.join(hosts)} …"):
            known, replies = executor.ask_ahead(expansion, {h: facts_command(cluster, h) for h in hosts})
        checks = [c for h in hosts for c in judged(cluster, h, replies[h].result, replies[h].asked)]
        print_preflight(cluster, hosts, checks, quiet=True)  # a failed preflight ends the command here
    report = executor.run(expansion, known)
    if expansion.runbook == "install" and not report.failure:  # the engine link, for apply --dry's comparison
        for host in engine_hosts(expansion):
            (state_dir(cluster) / "engine").mkdir(parents=True, exist_ok=True)
            (state_dir(cluster) / "engine" / host).write_text(engine_link(cluster) + "\n")
    if not quiet_recap:
        console.print(recap(report))
        console.print(step_times(report))
        console.print(f"[dim]{_time.monotonic() - started:.1f} s; run log: {log}[/]")
    if report.failure:
        raise Failed(report.failure)
    if report.waiting:
        waits(report.waiting)
    return report


def generation_recording(cluster, cluster_file: str, expansion):
    """How this run is kept on each node it touches: a generation named by the time (microseconds) and the run."""


    now = datetime.datetime.now(datetime.UTC)
    gid = gen.generation_id(now.strftime("%Y%m%dT%H%M%S.%fZ"), expansion.runbook, expansion.tier)
    meta = {"phase": gen.phase_of(expansion.runbook, expansion.tier), "runbook": expansion.runbook,
            "cluster": cluster.cluster.name, "cluster_sha": file_digest(cluster_file),
            "time": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return gen.Recording(cluster.storage.generations_dir, gid, cluster.engine.install_dir, meta)


def run_named(s: Settings, cluster_file: str, collection: str, name: str, dry: bool = False, only: str | None = None,
              preflight: bool = False) -> None:
    """Run the operation `invoke <collection>.<name>` of the cluster file: its tiers and their managers say which
    runbook (the task list comes from the configured file; the command line may name another)."""
    cluster = load_cluster(cluster_file)
    ops = [o for o in operations(cluster) if o.collection == collection]
    op = next((o for o in ops if o.name == name), None)
    if op is None:
        raise Failed(f"{cluster_file} has no {collection}.{name} (it has {', '.join(o.task for o in ops) or 'none'}); "
                     f"invoke {collection}.tier --tier NAME reaches any tier of a file")
    report = run_runbook(s, op.runbook, cluster_file, op.tier, dry, only, op.part, preflight=preflight)
    if report is not None and op.runbook in ("retire-legacy", "restore-legacy"):
        said = [line for o in report.outcomes if o.step in ("record", "stop", "restore")
                for line in o.stdout.splitlines() if line.strip()]
        if said:  # what each node found, stopped or brought back (clusterbook-legacy's own lines)
            console.rule("what ran before clusterbook, node by node")
            console.print("\n".join(said), markup=False, highlight=False)


def run_operation(s: Settings, cluster_file: str, action: str, tier: str, dry: bool = False, only: str | None = None,
                  preflight: bool = False) -> None:
    """Run deploy/stop/restart of a tier named on the command line, by its manager (pure/operations.py)."""
    cluster = load_cluster(cluster_file)
    tier_named(cluster, tier)
    if not any(o.collection == action and o.name == tier for o in tier_operations(cluster)):
        raise Failed(unavailable_reason(cluster.tier(tier), action))
    run_named(s, cluster_file, action, tier, dry, only, preflight)


def status(s: Settings, cluster_file: str, only: str | None = None, dry: bool = False) -> None:
    """A table of node, unit, active state, port listening, models, GPU memory."""
    report = run_runbook(s, "status", cluster_file, dry=dry, only=only, quiet_recap=True)
    if report is None:  # dry run: the plan was printed
        return
    table = Table("node", "unit", "active", "port", "listening", "models", "GPU memory (MiB used/total)",
                  title="status")
    commands = Table("node", "unit", "generation", "command line", title="what each unit runs")
    cluster = load_cluster(cluster_file)
    patches = ", ".join(p.file.removeprefix("patches/") for p in cluster.engine.patches) or "none"
    engines = Table("node", "links to", "VERSION", "the cluster file's build",
                    title=f"llama.cpp on each node (the file: {cluster.engine.tag}, patches: {patches})")
    for o in report.outcomes:
        for line in o.stdout.splitlines():
            if line.startswith("engine "):
                _, link, version = (line.split() + ["-", "-"])[:3]
                engines.add_row(o.host, link, version, "[green]yes[/]" if link == f"{cluster.engine.tag}/bin"
                                else "[red]no[/]: invoke deploy.install")
            if line.startswith("cmdline "):
                head, _, args = line.partition(" :: ")
                _, unit, generation = (head.split(" ", 2) + ["-"])[:3]
                commands.add_row(o.host, unit, generation.replace(" ", "\n"), args.strip() or "[red]not running[/]")
        rows = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in o.stdout.splitlines()
                if not line.startswith(("cmdline ", "engine "))]
        gpu = next((r["gpu"] for r in rows if "gpu" in r), "none")
        for r in rows:
            if "unit" in r and "active" in r:
                active = r["active"]
                table.add_row(o.host, r["unit"], f"[green]{active}[/]" if active == "active" else f"[red]{active}[/]",
                              r["port"], "yes" if r["listening"] != "0" else "[red]no[/]", r.get("models") or "-",
                              gpu if gpu != "none" else "-")
    console.print(table)
    if engines.row_count:
        console.print(engines)
    if commands.row_count:
        console.print(commands)
    jobs = [json.loads(line) for o in report.outcomes for line in o.stdout.splitlines() if line.startswith("{")]
    if jobs:
        demand = any(j.get("on_demand") for j in jobs)
        table = Table("job", "id", "state", "reason", "nodes", "start", "endpoint", "script (sha256)",
                      *(["on demand"] if demand else []), title="SLURM jobs")
        for j in jobs:
            state = j["state"]
            shown = f"[green]{state}[/]" if state == "RUNNING" else f"[yellow]{state}[/]"
            extra = [j.get("on_demand") or "-"] if demand else []
            table.add_row(j["job"], j["id"] or "-", shown, j["reason"] or "-", j["nodes"] or "-", j["start"] or "-",
                          j["endpoint"] or "-", j.get("script") or "-", *extra)
        console.print(table)
        for j in (j for j in jobs if j.get("others")):  # a job name is anyone's: say so, touch nothing
            console.print(f"[yellow]not clusterbook's, left alone[/] (same name as {j['job']}): "
                          + "; ".join(f"job {o}" for o in j["others"].split(";")))
    if cluster.monitoring and not only:
        _live_figures(cluster)


MIN_DECODE_SAMPLE = (16, 0.1)  # tokens and generation seconds in the window below which a rate is not a speed


def decode_text(tokens: str | None, seconds: str | None) -> str:
    """A tier's decode speed as status shows it, from the tokens generated in the window and the generation seconds
    they took (llama-server's counters). A few tokens over a rounded time (the probe's one-token completions take
    ~0 s) is not a speed, so it is not shown as one."""
    if tokens is None or seconds is None:
        return "- (no generation)"
    n, t = float(tokens), float(seconds)
    if not (n >= MIN_DECODE_SAMPLE[0] and t >= MIN_DECODE_SAMPLE[1]):  # NaN fails both
        return "- (too few tokens to tell)"
    return f"{n / t:.1f}"


def _live_figures(cluster) -> None:
    """Each tier's decode speed and requests in flight, and each GPU's memory, as Prometheus has them now."""

    transport = connect(cluster)
    try:
        age = prometheus_query(transport, cluster,
                               f'time() - max(node_textfile_mtime_seconds{{file=~".*{PROBE_TEXTFILE}"}})')
        probed = (f"; health and first token as the tier probe found them {float(age[0]['value'][1]):.0f} s ago "
                  f"(it asks every {cluster.monitoring.probe_interval_s} s)" if age else "; the tier probe has not run")
        table = Table("tier", "healthy", "first token s", "decode tok/s (last 5 min)", "requests in flight",
                      title=f"live, from Prometheus on {cluster.monitoring.node}{probed}")
        for tier in cluster.tiers:
            healthy = prometheus_query(transport, cluster, f'clusterbook_tier_healthy{{tier="{tier.name}"}}')
            ttft = prometheus_query(transport, cluster, f'max(clusterbook_tier_ttft_seconds{{tier="{tier.name}"}})')
            tokens, seconds = (prometheus_query(transport, cluster,
                                                f'sum(increase(llamacpp:{counter}{{job="{job(tier)}"}}[5m]))')
                               for counter in ("tokens_predicted_total", "tokens_predicted_seconds_total"))
            busy = prometheus_query(transport, cluster, f'sum(llamacpp:requests_processing{{job="{job(tier)}"}})')
            table.add_row(tier.name, {"1": "yes", "0": "[red]no[/]"}.get(healthy[0]["value"][1]) if healthy
                          else "- (not probed)", f"{float(ttft[0]['value'][1]):.2f}" if ttft else "-",
                          decode_text(*(v[0]["value"][1] if v else None for v in (tokens, seconds))),
                          busy[0]["value"][1] if busy else "- (not scraped)")
        console.print(table)
        gpus = prometheus_query(transport, cluster, f"{GPU_METRICS}_memory_used_bytes / 2^30")
        if gpus:
            table = Table("node", "GPU", "memory used (GiB)", title="GPU memory, from Prometheus")
            for g in sorted(gpus, key=lambda g: (g["metric"].get("node", ""), g["metric"].get("gpu", ""))):
                table.add_row(g["metric"].get("node", "?"), g["metric"].get("gpu", "?"), f"{float(g['value'][1]):.2f}")
            console.print(table)
        _alerts(cluster, prometheus_alerts(transport, cluster))
    except RuntimeError as exc:
        console.print(f"[dim]no live figures: {exc} (invoke deploy.monitoring)[/]")
    finally:
        transport.close(cluster.monitoring.node)


def _alerts(cluster, alerts: list[dict]) -> None:
    """The alerts firing (and about to) as Prometheus has them, each with its troubleshooting entry; or a line that
    none is. Where Alertmanager sends them: the Monitoring page."""
    if not alerts:
        console.print(f"[green]no alert is firing[/] (Prometheus on {cluster.monitoring.node})")
        return
    table = Table("alert", "state", "since", "tier / node", "summary", "troubleshooting",
                  title="alerts, from Prometheus")
    for a in sorted(alerts, key=lambda a: (a.get("state") != "firing", a.get("activeAt", ""))):
        labels, notes = a.get("labels", {}), a.get("annotations", {})
        state = a.get("state", "?")
        table.add_row(escape(labels.get("alertname", "?")), f"[red]{state}[/]" if state == "firing" else state,
                      escape(a.get("activeAt", "-")[:19]), escape(labels.get("tier") or labels.get("node") or "-"),
                      escape(notes.get("summary", "-")),
                      escape(notes.get("runbook_url") or notes.get("troubleshooting") or "-"))
    console.print(table)


def logs(s: Settings, cluster_file: str, only: str | None = None, tier: str | None = None, dry: bool = False) -> None:
    """The last log lines of every tier (or one): journald for systemd tiers; job state, end state, job log and
    OOM kills for SLURM tiers."""
    cluster = load_cluster(cluster_file)
    if tier:
        tier_named(cluster, tier)
    names = [t.name for t in cluster.tiers]
    report = run_runbook(s, "logs", cluster_file, dry=dry, only=only, quiet_recap=True,
                         variables={"tiers_shown": [tier] if tier else names})
    if report is None:  # dry run: the plan was printed
        return
    for o in report.outcomes:
        console.rule(o.host)
        console.print(o.stdout, markup=False, highlight=False)
