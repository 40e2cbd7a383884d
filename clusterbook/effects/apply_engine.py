"""The apply/rollback engine: deploy what changed one phase at a time, check each phase with its scenarios before
and after, and put a phase that fails back to its last verified generation. How a runbook is deployed and how
scenarios are run are handed in, so this module imports no command."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.table import Table

from clusterbook.effects.change_hold import changing
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.executor import Executor
from clusterbook.effects.reporters import ConsoleReporter, RunLog, run_log_path
from clusterbook.effects.verified import listings, mark_verified, remember_verified, state_dir, verified_file
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.model.schema import Cluster
from clusterbook.pure import generations as gen
from clusterbook.pure import ownership
from clusterbook.pure import phases as ch
from clusterbook.pure.apply_history import ChangeRecord, PhaseRecord, Rollback, ScenarioRun
from clusterbook.pure.operations import rollback_restart, tier_operations
from clusterbook.pure.runbooks import available, expand


class Deploy(Protocol):
    """Run a runbook for a tier (or none) of a cluster file over SSH; raises Failed when a step fails."""

    def __call__(self, runbook_id: str, cluster_file: str, tier: str | None = None, *, part: str | None = None,
                 quiet_recap: bool = False) -> object: ...


Check = Callable[[str, ch.Phase, str, Path], ScenarioRun]  # (cluster file, phase, when, where reports go)


def verified_cluster(cluster_file: str, cluster: Cluster) -> tuple[str, Cluster] | None:
    """The last verified cluster file and its model; None when there is none yet, or the schema has moved past it."""
    known = verified_file(cluster, cluster_file)
    try:
        return (str(known), load_cluster(known)) if known.is_file() else None
    except InputError:
        return None


def restored_file(cluster_file: str, cluster: Cluster, phase: str) -> str:
    """The cluster file that describes what a rollback puts back (the last verified one, when it has the phase):
    the tier is started and waited for with its ports and settings, not with those of the change that failed."""
    verified = verified_cluster(cluster_file, cluster)
    if verified is None or (phase in [t.name for t in cluster.tiers]
                            and phase not in [t.name for t in verified[1].tiers]):
        return cluster_file
    return verified[0]


def known_good_file(cluster_file: str, cluster: Cluster, phase: ch.Phase) -> str | None:
    """The file the scenarios before a change (and after its rollback) check against: the last verified one,
    else the new one; None for a tier the last verified file does not have (nothing to check before it)."""
    verified = verified_cluster(cluster_file, cluster)
    if verified is None:
        return cluster_file
    if phase.tier and phase.tier not in [t.name for t in verified[1].tiers]:
        return None
    return verified[0]


def phase_hosts(cluster: Cluster, name: str) -> list[str]:
    """The nodes a phase's deploy touches; Failed for a name that is no phase of this cluster."""
    phase = next((p for p in ch.phases(cluster) if p.name == name), None)
    if phase is None:
        names = ", ".join(p.name for p in ch.phases(cluster))
        raise Failed(f"nothing to roll back by the name '{name}' (the phases of this cluster: {names})")
    return ch.phase_hosts(cluster, expand(available()[phase.runbook], cluster, phase.tier))


@dataclass(frozen=True)
class ApplyEngine:
    """Apply and roll back with the deploy and the check it is given; run logs go to `runs`."""

    deploy: Deploy
    check: Check
    runs: Path

    def rollback(self, cluster_file: str, phase: str) -> Rollback:
        """Put back on each node what the phase's generations since its last verified one replaced, then start it
        again as its manager does, with the file it restores; the seconds until it answers."""
        cluster = load_cluster(cluster_file)
        start_with = restored_file(cluster_file, cluster, phase)
        chosen = {h: gen.to_restore(gens, phase) for h, gens in listings(cluster, phase_hosts(cluster, phase)).items()}
        chosen = {h: gs for h, gs in chosen.items() if gs}
        restored = [{"host": h, "generation": g.id, "files": list(g.files) + [f"{p} (remove)" for p in g.created],
                     "engine": g.engine_before if g.engine_moved else ""} for h, gs in chosen.items() for g in gs]
        if not restored:
            console.print(f"rollback {phase}: nothing to restore (no generation since its last verified one)")
            return Rollback([], 0.0, True)
        table = Table("node", "generation", "puts back", "engine", title=f"rollback: {phase}")
        for r in restored:
            table.add_row(r["host"], r["generation"], "\n".join(r["files"]) or "-", r["engine"] or "-")
        console.print(table)
        started = time.monotonic()
        log = run_log_path(self.runs, cluster.cluster.name, f"rollback-{phase}")
        report = Executor(connect(cluster), state_dir(cluster) / "deployed", [ConsoleReporter(), RunLog(log)],
                          claim=lambda host: ownership.claim_command(cluster, host)
                          ).run(ch.rollback_expansion(cluster, phase, chosen))
        if report.failure:
            return Rollback(restored, time.monotonic() - started, False, report.failure)
        tier = next((t for t in cluster.tiers if t.name == phase), None)
        if tier is not None:
            op = rollback_restart(tier)
            try:
                self.deploy(op.runbook, start_with, tier.name, part=op.part, quiet_recap=True)
            except Failed as exc:
                return Rollback(restored, time.monotonic() - started, False, str(exc))
        seconds = time.monotonic() - started
        console.print(f"[bold]rollback {phase}[/]: restored and answering after {seconds:.1f} s")
        return Rollback(restored, seconds, True)

    def apply(self, record: ChangeRecord, cluster: Cluster, todo: list[ch.PhasePlan], out: Path) -> ChangeRecord:
        """Deploy each phase in order until one does not land; the record, also written next to `out`. A change
        that landed whole becomes the verified file, and the engine under it verified."""
        started = time.monotonic()
        try:
            for pp in todo:
                record.phases.append(self.apply_phase(record.cluster_file, cluster, pp, out))
                if record.phases[-1].outcome not in ("landed", "waiting"):
                    break
            outcomes = {p.outcome for p in record.phases}
            record.outcome = next((o for o in ("failed", "rolled back", "not started", "waiting") if o in outcomes),
                                  "landed")
        finally:
            record.seconds = time.monotonic() - started
            out.with_suffix(".json").write_text(record.to_json())
        if record.outcome == "landed":
            remember_verified(record.cluster_file, cluster)
            mark_verified(cluster, {"engine"})
        return record

    def apply_phase(self, cluster_file: str, cluster: Cluster, pp: ch.PhasePlan, out: Path) -> PhaseRecord:
        """One phase: its scenarios before (it must be healthy to begin), its deploy, its scenarios after; a
        rollback and the scenarios again when the deploy or the scenarios after fail."""
        phase = pp.phase
        console.rule(f"apply: {phase.name}")
        rec = PhaseRecord(phase.name, [vars(c) for c in pp.changes]
                          + [{"host": h, "what": "restart on the new engine", "before": "", "after": ""}
                             for h in pp.engine_hosts])
        known_good = known_good_file(cluster_file, cluster, phase)
        if phase.scenarios and known_good:
            rec.scenarios.append(self.check(known_good, phase, "before", out))
            if not rec.scenarios[-1].ok:  # not healthy before: a change now could not be told from what was there
                rec.outcome = "not started"
                rec.error = (f"{phase.name} fails its scenarios before the change ("
                             + "; ".join(rec.scenarios[-1].failed) + f"), checked with {known_good}"
                             + ("" if known_good != cluster_file else " (no verified file yet: `invoke verify` "
                                "records one)") + "; nothing was changed")
                return rec
            if not rec.scenarios[-1].waiting:  # known good: a rollback returns to it (a waiting tier proves nothing)
                mark_verified(cluster, {phase.name})
        with changing(cluster, phase.tier, connect(cluster)):  # the gateway holds the tier's requests meanwhile
            return self._change(cluster_file, cluster, pp, rec, known_good, out)

    def _change(self, cluster_file: str, cluster: Cluster, pp: ch.PhasePlan, rec: PhaseRecord,
                known_good: str | None, out: Path) -> PhaseRecord:
        """The phase's deploy and scenarios after it; its rollback and the scenarios again where either failed."""
        phase = pp.phase
        try:
            reports = []
            if pp.changes:
                reports.append(self.deploy(phase.runbook, cluster_file, phase.tier))
            if pp.engine_hosts:  # every process on the new build, not only those the deploy restarted
                op = next(o for o in tier_operations(cluster) if o.collection == "restart" and o.name == phase.tier)
                reports.append(self.deploy(op.runbook, cluster_file, phase.tier, part=op.part))
            rec.waiting = next((r.waiting for r in reports if getattr(r, "waiting", None)), None)
        except Failed as exc:
            rec.error = str(exc)
        if rec.error is None and rec.waiting:  # its job waits for nodes VASP holds: a normal day, never rolled back
            rec.outcome = "waiting"
            console.print(f"[bold cyan]{phase.name}: deployed; its job waits for its nodes[/] (kept, not rolled back; "
                          f"`invoke verify --tier {phase.tier}` once it runs): {rec.waiting}", highlight=False)
            return rec
        if rec.error is None and phase.scenarios:
            rec.scenarios.append(self.check(cluster_file, phase, "after", out))
            if rec.scenarios[-1].ok and rec.scenarios[-1].waiting:  # VASP took its nodes meanwhile: kept, waiting
                rec.outcome, rec.waiting = "waiting", "; ".join(rec.scenarios[-1].waiting)
                return rec
        if rec.error is None and (not phase.scenarios or rec.scenarios[-1].ok):
            rec.outcome = "landed"
            if phase.scenarios:  # the engine has none of its own: the tiers after it verify it (see apply)
                mark_verified(cluster, {phase.name})
            return rec
        console.print(f"[bold red]{phase.name}: the change failed[/] "
                      f"({'its deploy' if rec.error else 'its scenarios'}); rolling back")
        rec.rollback = self.rollback(cluster_file, phase.name)
        if phase.scenarios and known_good:
            rec.scenarios.append(self.check(known_good, phase, "after rollback", out))
        back = rec.rollback.answered and (not phase.scenarios or rec.scenarios[-1].ok)
        rec.outcome = "rolled back" if back else "failed"
        return rec
