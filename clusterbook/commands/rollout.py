"""Safe change: `invoke apply` (what changed, deployed one phase at a time, each verified by its scenarios and
rolled back when they fail) and `invoke rollback` (the last verified generation back on the nodes, restarted).
The engine is effects/apply_engine.py; this module reads the nodes, prints, and hands it runbooks and scenarios."""

from __future__ import annotations

import datetime
import functools
from pathlib import Path

from rich.table import Table

from clusterbook.commands.acceptance import scenarios
from clusterbook.commands.arguments import tier_named
from clusterbook.commands.reportstamp import file_digest
from clusterbook.commands.runbooks import run_runbook
from clusterbook.commands.settings import Settings
from clusterbook.effects.apply_engine import ApplyEngine, phase_hosts, restored_file
from clusterbook.effects.change_hold import changing
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.node_facts import live_facts, recorded_facts
from clusterbook.effects.scenario_run import run_scenarios
from clusterbook.model.loader import load_cluster
from clusterbook.model.schema import Cluster
from clusterbook.pure import phases as ch
from clusterbook.pure.apply_history import ChangeRecord


def changes_dir(s: Settings, cluster: Cluster) -> Path:
    return s.runs / "changes" / cluster.cluster.name


def engine(s: Settings) -> ApplyEngine:
    """The engine with clusterbook's deploy (run_runbook) and scenario runs (a pytest of the phase's tag)."""
    names = {sc.test_name: sc.name for sc in scenarios()}
    return ApplyEngine(deploy=functools.partial(run_runbook, s),
                        check=functools.partial(run_scenarios, names=names), runs=s.runs)


def print_plan(plans: list[ch.PhasePlan], dry: bool) -> None:
    source = "the last deploys recorded in .clusterbook/ (--dry contacts no node)" if dry else "the nodes"
    table = Table("phase", "node", "what", "before", "after", title=f"apply: what differs from {source}")
    for pp in plans:
        for c in pp.changes:
            table.add_row(pp.phase.name, c.host, c.what, c.before, f"[yellow]{c.after}[/]")
        if pp.engine_hosts:
            table.add_row(pp.phase.name, ", ".join(pp.engine_hosts), "restart on the new engine", "", "")
    if any(pp.changed for pp in plans):
        console.print(table)


def print_record(record: ChangeRecord, log: Path) -> None:
    console.rule(f"apply: {record.outcome}")
    for p in record.phases:
        console.print(f"{p.phase}: {p.outcome}" + "".join(f"; {r.when}: {len(r.passed)} passed, {len(r.failed)} "
                                                          "failed" for r in p.scenarios)
                      + (f"; answered again {p.rollback.seconds:.1f} s after the rollback began"
                         if p.rollback and p.rollback.answered else ""))
    console.print(f"[dim]change log: {log} (the Changes page of the docs)[/]")


def rollback(s: Settings, cluster_file: str, tier: str | None = None, dry: bool = False) -> None:
    """`invoke rollback`: one tier, or every tier (last first). --dry contacts nothing: it says what it would read
    and from where."""
    cluster = load_cluster(cluster_file)
    phases = [tier] if tier else [t.name for t in reversed(cluster.tiers)]
    if dry:
        for phase in phases:
            console.print(f"rollback {phase} --dry: would read the generations in {cluster.storage.generations_dir} "
                          f"on {', '.join(phase_hosts(cluster, phase))} (over SSH), put back every file and engine "
                          f"link changed since {phase}'s last verified generation, and start it again with "
                          f"{restored_file(cluster_file, cluster, phase)}. Nothing was contacted or changed.")
        return
    apply_engine, transport, failed = engine(s), connect(cluster), []
    for phase in phases:
        with changing(cluster, phase, transport):  # the gateway holds the tier's requests meanwhile
            back = apply_engine.rollback(cluster_file, phase)
        failed += [] if back.answered else [back.error]
    if failed:
        raise Failed("rollback did not bring everything back:\n" + "\n".join(e or "" for e in failed))


def apply(s: Settings, cluster_file: str, tier: str | None = None, dry: bool = False) -> None:
    """Compare, then deploy what changed phase by phase; each phase's scenarios before and after; a phase whose
    deploy or scenarios fail is rolled back and verified again, and apply stops there."""
    cluster = load_cluster(cluster_file)
    if tier is not None:
        tier_named(cluster, tier)
    exps = ch.phase_expansions(cluster)
    facts = recorded_facts(cluster) if dry else live_facts(cluster, exps)
    plans = ch.plan(cluster, exps, facts, check_jobs=not dry)
    if tier:  # only the tier's own change: an engine move is the engine phase's (apply without --tier)
        plans = [ch.PhasePlan(pp.phase, pp.changes) for pp in plans if pp.phase.name == tier]
    print_plan(plans, dry)
    todo = [pp for pp in plans if pp.changed]
    if not todo:
        console.print(f"[green]Nothing to apply[/]: every file, the engine link{' and every job' if not dry else ''} "
                      f"{'as recorded ' if dry else ''}match {cluster_file}; nothing was deployed.")
        return
    if dry:
        console.print(f"--dry: {len(todo)} phase(s) would be deployed in this order, each verified by its scenarios: "
                      + ", ".join(pp.phase.name for pp in todo) + ". Nothing was contacted or changed.")
        return
    now = datetime.datetime.now(datetime.UTC)
    out = changes_dir(s, cluster) / now.strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    record = engine(s).apply(ChangeRecord(cluster.cluster.name, cluster_file, file_digest(cluster_file),
                                          now.strftime("%Y-%m-%dT%H:%M:%SZ")), cluster, todo, out)
    print_record(record, out.with_suffix(".json"))
    if record.outcome == "waiting":  # run_runbook said so, and the process ends with its exit status
        return
    if record.outcome != "landed":
        last = record.phases[-1]
        raise Failed(f"apply: {record.outcome} at {last.phase}: "
                     + (last.error if last.outcome == "not started" else
                        f"its deploy failed:\n{last.error}" if last.error else "its scenarios failed: "
                        + "; ".join(next((r.failed for r in last.scenarios if r.when == "after"), []))))
