"""Safe change: `invoke apply` (what changed, deployed one phase at a time, each verified by its scenarios and
rolled back when they fail) and `invoke rollback` (the last verified generation back on the nodes, restarted)."""

from __future__ import annotations

import datetime
import hashlib
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.table import Table

from clusterbook.commands.acceptance import scenarios
from clusterbook.commands.arguments import tier_named
from clusterbook.commands.reportstamp import file_digest
from clusterbook.commands.runbooks import run_runbook
from clusterbook.commands.settings import Settings
from clusterbook.effects.console import Failed, console
from clusterbook.effects.executor import Executor
from clusterbook.effects.reporters import ConsoleReporter, RunLog
from clusterbook.effects.ssh import SshTransport
from clusterbook.effects.verified import listings, mark_verified, on_each, remember_verified, state_dir, verified_file
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.model.schema import Cluster
from clusterbook.pure import changes as ch
from clusterbook.pure import generations as gen
from clusterbook.pure.changelog import ChangeRecord, PhaseRecord, Rollback, ScenarioRun
from clusterbook.pure.operations import UNIT_RELOAD, rollback_restart, tier_operations
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion, available, expand


def changes_dir(s: Settings, cluster: Cluster) -> Path:
    return s.runs / "changes" / cluster.cluster.name


# --- what changed ---------------------------------------------------------------------------------------------
def expansions(cluster: Cluster) -> list[tuple[ch.Phase, Expansion]]:

    books, artifacts = available(), render_artifacts(cluster)
    return [(p, expand(books[p.runbook], cluster, p.tier, artifacts=artifacts))
            for p in ch.phases(cluster)]


def live_facts(cluster: Cluster, exps: list[tuple[ch.Phase, Expansion]]) -> dict[str, ch.NodeFacts]:
    """What the nodes hold now: one command per node (sha256 of every file the phases put there, the engine link,
    the running jobs' script digests on the controller)."""
    paths: dict[str, dict[str, None]] = {}  # per host, each path once, in order
    jobs: dict[str, list[str]] = {}
    for phase, expansion in exps:
        for host, files in ch.puts(expansion).items():
            paths.setdefault(host, {}).update(dict.fromkeys(f.path for f in files))
        if (job := ch.slurm_job(cluster, phase)) and (host := ch.submit_host(expansion)):
            jobs.setdefault(host, []).append(job)
    hosts = [n.name for n in cluster.nodes if n.name in paths or n.name in jobs]
    out = on_each(cluster, hosts, lambda h: ch.facts_command(list(paths.get(h, {})), cluster.engine.install_dir,
                                                          jobs.get(h, [])))
    return {h: ch.facts_from_output(text) for h, text in out.items()}


def recorded_facts(cluster: Cluster) -> dict[str, ch.NodeFacts]:
    """What the last deploys from this checkout put on the nodes (apply --dry contacts nothing)."""

    base = state_dir(cluster)
    facts = {}
    for node in cluster.nodes:
        root = base / "deployed" / node.name
        files = {"/" + p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in root.rglob("*") if p.is_file()} if root.is_dir() else {}
        engine = base / "engine" / node.name
        facts[node.name] = ch.NodeFacts(files, engine.read_text().strip() if engine.is_file() else ch.NOT_THERE)
    return facts


def print_plan(plans: list[ch.PhasePlan], dry: bool) -> None:
    source = "the last deploys recorded in .clusterbook/ (--dry contacts no node)" if dry else "the nodes"
    table = Table("phase", "node", "what", "before", "after", title=f"apply: what differs from {source}")
    for pp in plans:
        for c in pp.changes:
            table.add_row(pp.phase.unit, c.host, c.what, c.before, f"[yellow]{c.after}[/]")
        if pp.restart_only:
            table.add_row(pp.phase.unit, ", ".join(pp.engine_hosts), "restart on the new engine", "", "")
    if any(pp.changed for pp in plans):
        console.print(table)


# --- scenarios and verified generations -------------------------------------------------------------------------
def run_scenarios(cluster_file: str, phase: ch.Phase, when: str, out: Path) -> ScenarioRun:
    """The phase's scenarios (its tag; a tier's narrowed to that tier) in a pytest of their own."""

    junit = out / f"{phase.unit}-{when.replace(' ', '-')}.junit.xml"
    argv = [sys.executable, "-m", "pytest", "tests/acceptance", "--live-cluster", cluster_file, "-p",
            "no:cacheprovider", "-m", phase.scenarios, f"--junitxml={junit}", "-q", "--tb=line", "-rN"]
    if phase.tier:
        argv += ["--tier", phase.tier]
    console.print(f"[bold]{phase.unit}[/]: scenarios {when} …")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    names = {s.test_name: s.name for s in scenarios()}
    run = ScenarioRun(when, seconds=time.monotonic() - started, report=str(junit))
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        run.failed.append(f"pytest exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}")
        return run
    for case in cases:
        name = names.get(case.get("name", ""), case.get("name", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            run.failed.append(name)
        elif case.find("skipped") is None:
            run.passed.append(name)
    colour = "green" if run.ok else "red"
    console.print(f"  [{colour}]{len(run.passed)} passed, {len(run.failed)} failed[/] ({run.seconds:.0f} s)"
                  + "".join(f"\n  [red]failed:[/] {n}" for n in run.failed))
    return run


# --- rollback -------------------------------------------------------------------------------------------------
def unit_hosts(cluster: Cluster, unit: str) -> list[str]:
    """The nodes a unit's deploy touches (a SLURM tier's controller too)."""
    phase = next((p for p in ch.phases(cluster) if p.unit == unit), None)
    if phase is None:
        names = ", ".join(p.unit for p in ch.phases(cluster))
        raise Failed(f"nothing to roll back by the name '{unit}' (the units of this cluster: {names})")
    exp = expand(available()[phase.runbook], cluster, phase.tier)
    return [n.name for n in cluster.nodes if any(n.name in s.hosts for s in exp.steps)]


def verified_cluster(cluster_file: str, cluster: Cluster) -> tuple[str, Cluster] | None:
    """The last verified cluster file and its model; None when there is none yet, or the schema has moved past it."""
    known = verified_file(cluster, cluster_file)
    try:
        return (str(known), load_cluster(known)) if known.is_file() else None
    except InputError:
        return None


def restored_file(cluster_file: str, cluster: Cluster, unit: str) -> str:
    """The cluster file that describes what a rollback puts back (the last verified one, when it has the unit):
    the tier is started and waited for with its ports and settings, not with those of the change that failed."""
    verified = verified_cluster(cluster_file, cluster)
    if verified is None or (unit in [t.name for t in cluster.tiers]
                            and unit not in [t.name for t in verified[1].tiers]):
        return cluster_file
    return verified[0]


def rollback_unit(s: Settings, cluster_file: str, unit: str, dry: bool = False) -> Rollback:
    """Put back on each node what the unit's generations since its last verified one replaced, then start it
    again as its manager does, with the file it restores; the seconds until it answers. --dry contacts nothing:
    it says what it would read and from where."""

    cluster = load_cluster(cluster_file)
    gdir, install_dir = cluster.storage.generations_dir, cluster.engine.install_dir
    start_with = restored_file(cluster_file, cluster, unit)
    if dry:
        console.print(f"rollback {unit} --dry: would read the generations in {gdir} on "
                      f"{', '.join(unit_hosts(cluster, unit))} (over SSH), put back every file and engine link "
                      f"changed since {unit}'s last verified generation, and start it again with {start_with}. "
                      "Nothing was contacted or changed.")
        return Rollback([], 0.0, False, "dry run")
    chosen = {h: gen.to_restore(gens, unit) for h, gens in listings(cluster, unit_hosts(cluster, unit)).items()}
    chosen = {h: gs for h, gs in chosen.items() if gs}
    restored = [{"host": h, "generation": g.id, "files": list(g.files) + [f"{p} (remove)" for p in g.created],
                 "engine": g.engine_before if g.engine_moved else ""} for h, gs in chosen.items() for g in gs]
    table = Table("node", "generation", "puts back", "engine", title=f"rollback: {unit}")
    for r in restored:
        table.add_row(r["host"], r["generation"], "\n".join(r["files"]) or "-", r["engine"] or "-")
    if not restored:
        console.print(f"rollback {unit}: nothing to restore (no generation since its last verified one)")
        return Rollback([], 0.0, True)
    console.print(table)
    started = time.monotonic()
    per_host = {}
    for h, gs in chosen.items():
        paths = [p for g in gs for p in (*g.files, *g.created)]
        per_host[h] = [Command(gen.restore_command(gdir, g, install_dir), name=f"restore {g.id}") for g in gs]
        per_host[h] += [Command(c) for c in gen.after_restore(paths)]
        if unit in UNIT_RELOAD:
            per_host[h].append(Command(UNIT_RELOAD[unit]))
    expansion = Expansion("rollback", f"Roll {unit} back", "", None,
                          [ExpandedStep("restore", "Put back the files and the engine link", "", per_host)])
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log = s.runs / f"{stamp}-{cluster.cluster.name}-rollback-{unit}.jsonl"
    report = Executor(SshTransport(cluster), state_dir(cluster) / "deployed", [ConsoleReporter(), RunLog(log)]
                      ).run(expansion)
    if report.failure:
        return Rollback(restored, time.monotonic() - started, False, report.failure)
    tier = next((t for t in cluster.tiers if t.name == unit), None)
    if tier is not None:
        op = rollback_restart(tier)
        try:
            run_runbook(s, op.runbook, start_with, tier.name, part=op.part, quiet_recap=True)
        except Failed as exc:
            return Rollback(restored, time.monotonic() - started, False, str(exc))
    seconds = time.monotonic() - started
    console.print(f"[bold]rollback {unit}[/]: restored and answering after {seconds:.1f} s")
    return Rollback(restored, seconds, True)


def rollback(s: Settings, cluster_file: str, tier: str | None = None, dry: bool = False) -> None:
    """`invoke rollback`: one tier, or every tier (last first)."""
    cluster = load_cluster(cluster_file)
    units = [tier] if tier else [t.name for t in reversed(cluster.tiers)]
    failed = [r.error for u in units if not (r := rollback_unit(s, cluster_file, u, dry)).answered and not dry]
    if failed:
        raise Failed("rollback did not bring everything back:\n" + "\n".join(e or "" for e in failed))


# --- apply ----------------------------------------------------------------------------------------------------
def apply(s: Settings, cluster_file: str, tier: str | None = None, dry: bool = False) -> None:
    """Compare, then deploy what changed phase by phase; each phase's scenarios before and after; a phase whose
    deploy or scenarios fail is rolled back and verified again, and apply stops there."""
    cluster = load_cluster(cluster_file)
    if tier is not None:
        tier_named(cluster, tier)
    exps = expansions(cluster)
    facts = recorded_facts(cluster) if dry else live_facts(cluster, exps)
    plans = ch.plan(cluster, exps, facts, check_jobs=not dry)
    if tier:  # only the tier's own change: an engine move is the engine phase's (apply without --tier)
        plans = [ch.PhasePlan(pp.phase, pp.changes) for pp in plans if pp.phase.unit == tier]
    print_plan(plans, dry)
    todo = [pp for pp in plans if pp.changed]
    if not todo:
        console.print(f"[green]Nothing to apply[/]: every file, the engine link{' and every job' if not dry else ''} "
                      f"{'as recorded ' if dry else ''}match {cluster_file}; nothing was deployed.")
        return
    if dry:
        console.print(f"--dry: {len(todo)} phase(s) would be deployed in this order, each verified by its scenarios: "
                      + ", ".join(pp.phase.unit for pp in todo) + ". Nothing was contacted or changed.")
        return
    now = datetime.datetime.now(datetime.UTC)
    record = ChangeRecord(cluster.cluster.name, cluster_file, file_digest(cluster_file),
                          now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    out = changes_dir(s, cluster) / now.strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        for pp in todo:
            phase_record = apply_phase(s, cluster_file, cluster, pp, out)
            record.phases.append(phase_record)
            if phase_record.outcome != "landed":
                break
        outcomes = {p.outcome for p in record.phases}
        record.outcome = "failed" if "failed" in outcomes else "rolled back" if "rolled back" in outcomes \
            else "not started" if "not started" in outcomes else "landed"
    finally:
        record.seconds = time.monotonic() - started
        (out.with_suffix(".json")).write_text(record.to_json())
    if record.outcome == "landed":
        remember_verified(cluster_file, cluster)
        mark_verified(cluster, {"engine"})
    console.rule(f"apply: {record.outcome}")
    for p in record.phases:
        console.print(f"{p.unit}: {p.outcome}" + "".join(f"; {r.when}: {len(r.passed)} passed, {len(r.failed)} "
                                                          "failed" for r in p.scenarios)
                      + (f"; answered again {p.rollback.seconds:.1f} s after the rollback began"
                         if p.rollback and p.rollback.answered else ""))
    console.print(f"[dim]change log: {out.with_suffix('.json')} (the Changes page of the docs)[/]")
    if record.outcome != "landed":
        last = record.phases[-1]
        raise Failed(f"apply: {record.outcome} at {last.unit}: "
                     + (last.error if last.outcome == "not started" else
                        f"its deploy failed:\n{last.error}" if last.error else "its scenarios failed: "
                        + "; ".join(next((r.failed for r in last.scenarios if r.when == "after"), []))))


def known_good_file(cluster_file: str, cluster: Cluster, phase: ch.Phase) -> str | None:
    """The file the scenarios before a change (and after its rollback) check against: the last verified one,
    else the new one; None for a tier the last verified file does not have (nothing to check before it)."""
    verified = verified_cluster(cluster_file, cluster)
    if verified is None:
        return cluster_file
    if phase.tier and phase.tier not in [t.name for t in verified[1].tiers]:
        return None
    return verified[0]


def apply_phase(s: Settings, cluster_file: str, cluster: Cluster, pp: ch.PhasePlan, out: Path) -> PhaseRecord:
    phase = pp.phase
    console.rule(f"apply: {phase.unit}")
    rec = PhaseRecord(phase.unit, [vars(c) for c in pp.changes]
                      + [{"host": h, "what": "restart on the new engine", "before": "", "after": ""}
                         for h in pp.engine_hosts if pp.restart_only])
    known_good = known_good_file(cluster_file, cluster, phase)
    if phase.scenarios and known_good:
        rec.scenarios.append(run_scenarios(known_good, phase, "before", out))
        if not rec.scenarios[-1].ok:  # not healthy before: a change now could not be told from what was there
            rec.outcome = "not started"
            rec.error = (f"{phase.unit} fails its scenarios before the change ("
                         + "; ".join(rec.scenarios[-1].failed) + f"), checked with {known_good}"
                         + ("" if known_good != cluster_file else " (no verified file yet: `invoke verify` records "
                            "one)") + "; nothing was changed")
            return rec
        mark_verified(cluster, {phase.unit})  # the state before the change is known good: a rollback returns to it
    try:
        if pp.restart_only:
            op = next(o for o in tier_operations(cluster) if o.collection == "restart" and o.name == phase.tier)
            run_runbook(s, op.runbook, cluster_file, phase.tier, part=op.part)
        else:
            run_runbook(s, phase.runbook, cluster_file, phase.tier)
    except Failed as exc:
        rec.error = str(exc)
    if rec.error is None and phase.scenarios:
        rec.scenarios.append(run_scenarios(cluster_file, phase, "after", out))
    if rec.error is None and (not phase.scenarios or rec.scenarios[-1].ok):
        rec.outcome = "landed"
        if phase.scenarios:  # the engine has none of its own: the tiers after it verify it (see apply)
            mark_verified(cluster, {phase.unit})
        return rec
    console.print(f"[bold red]{phase.unit}: the change failed[/] "
                  f"({'its deploy' if rec.error else 'its scenarios'}); rolling back")
    rec.rollback = rollback_unit(s, cluster_file, phase.unit)
    if phase.scenarios and known_good:
        rec.scenarios.append(run_scenarios(known_good, phase, "after rollback", out))
    back = rec.rollback.answered and (not phase.scenarios or rec.scenarios[-1].ok)
    rec.outcome = "rolled back" if back else "failed"
    return rec
