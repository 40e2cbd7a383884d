"""What `invoke apply` would change: the cluster's phases in deploy order, and for each, the files that differ from
what its nodes hold, the engine link, and a SLURM job that runs an older script. Pure: facts in, changes out."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, field

from clusterbook.model.schema import Cluster
from clusterbook.pure import generations as gen
from clusterbook.pure import slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.layout import sbatch_path
from clusterbook.pure.operations import PHASE_RELOAD, cluster_operations, tier_operations
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion, PutFile, available, expand

NOT_THERE = "-"  # a file a node does not have, a link that is not set


@dataclass(frozen=True)
class Phase:
    """One phase of a change, deployed as a whole and verified by its own scenarios before the next begins."""

    name: str  # engine | slurm | a tier's name | router | gateway | monitoring
    runbook: str
    tier: str | None = None
    scenarios: str | None = None  # the scenario tag that checks it (a tier's are narrowed to it with --tier)

    @property
    def is_tier(self) -> bool:
        return self.tier is not None


def phases(c: Cluster) -> list[Phase]:
    """Dependency order: build and install, SLURM, each tier (workers before heads inside its runbook), the router
    script, the gateway, the monitoring."""
    by_task = {op.task: op for op in cluster_operations(c)}
    out = []
    if "deploy.install" in by_task:
        out.append(Phase("engine", "install"))
    if "deploy.slurm" in by_task:
        out.append(Phase("slurm", "slurm"))
    for op in tier_operations(c):
        if op.collection == "deploy" and op.name == op.tier:
            out.append(Phase(op.tier, op.runbook, op.tier, "tier"))
    out.append(Phase("router", "router", scenarios="router"))
    if "deploy.gateway" in by_task:
        out.append(Phase("gateway", "gateway", scenarios="gateway"))
    if "deploy.monitoring" in by_task:
        out.append(Phase("monitoring", "monitoring", scenarios="monitoring"))
    return out


@dataclass(frozen=True)
class NodeFacts:
    """What a node holds now: sha256 per file path, where the engine link points, each job's script digest."""

    files: dict[str, str] = field(default_factory=dict)
    engine: str = NOT_THERE
    jobs: dict[str, str] = field(default_factory=dict)  # job name -> the running job's comment (script digest)


@dataclass(frozen=True)
class Change:
    """One difference on one node: a file (new or changed), the engine link, or a job's script."""

    host: str
    what: str
    before: str
    after: str

    @property
    def kind(self) -> str:
        return "new" if self.before == NOT_THERE else "changed"


@dataclass(frozen=True)
class PhasePlan:
    phase: Phase
    changes: list[Change]
    engine_hosts: tuple[str, ...] = ()  # its nodes where the engine moves: the tier restarts on the new build (after
    # its deploy, if its own files changed too: a deploy restarts only what they touch, a head and not its workers)

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.engine_hosts)


def puts(expansion: Expansion) -> dict[str, list[PutFile]]:
    """Every upload of an expansion, per host (a file uploaded twice counts once)."""
    out: dict[str, dict[str, PutFile]] = {}
    for step in expansion.steps:
        for host, actions in step.hosts.items():
            for a in actions:
                if isinstance(a, PutFile):
                    out.setdefault(host, {})[a.path] = a
    return {h: list(files.values()) for h, files in out.items()}


def engine_link(c: Cluster) -> str:
    """Where install_dir should point: the build's own folder (the install runbook's link step)."""
    return f"{c.engine.tag}/bin"


def engine_hosts(install: Expansion) -> list[str]:
    """The nodes the install runbook links (its engine-link part)."""
    return [h for step in install.steps if "engine-link" in step.parts for h in step.hosts]


def slurm_job(c: Cluster, phase: Phase) -> str | None:
    """The SLURM job a phase submits (its tier's, under SLURM), else None."""
    tier = c.tier(phase.tier) if phase.tier else None
    return topo.units(tier).job if tier is not None and tier.manager == "slurm" else None


def submit_host(expansion: Expansion) -> str | None:
    """Where deploy-slurm submits the job: the host of its job-submit part (the controller)."""
    return next((h for step in expansion.steps if "job-submit" in step.parts for h in step.hosts), None)


def facts_command(paths: list[str], install_dir: str, jobs: dict[str, str]) -> str:
    """One command that prints a node's facts for facts_from_output (missing files print nothing); jobs: each SLURM
    job's name and the command that prints its own jobs' comments (slurmjob.jobs)."""
    parts = [f"sha256sum {' '.join(shlex.quote(p) for p in paths)} 2>/dev/null" if paths else "true",
             f"echo \"engine $(readlink {shlex.quote(install_dir.rstrip('/'))} || echo {NOT_THERE})\""]
    parts += [f"echo \"job {shlex.quote(j)} $({own} 2>/dev/null | head -n 1)\"" for j, own in jobs.items()]
    return "; ".join(parts) + "; true"


def facts_from_output(text: str) -> NodeFacts:
    files, jobs, engine = {}, {}, NOT_THERE
    for line in text.splitlines():
        if line.startswith("engine "):
            engine = line.split(" ", 1)[1].strip() or NOT_THERE
        elif line.startswith("job "):
            _, name, *rest = line.split(" ", 2) + [""]
            jobs[name] = rest[0].strip()
        elif len(parts := line.split(None, 1)) == 2 and len(parts[0]) == 64:
            files[parts[1].strip()] = parts[0]
    return NodeFacts(files, engine, jobs)


def plan(c: Cluster, expansions: list[tuple[Phase, Expansion]], facts: dict[str, NodeFacts],
         check_jobs: bool = True) -> list[PhasePlan]:
    """Per phase: the files that differ, the engine link where it moves, a SLURM job on an older script."""
    moved: list[str] = []
    plans = []
    seen: set[tuple[str, str]] = set()  # a file two phases put (the SLURM keeper) counts in the first
    for phase, expansion in expansions:
        changes = []
        for host, files in puts(expansion).items():
            held = facts.get(host, NodeFacts()).files
            changes += [Change(host, f.path, held.get(f.path, NOT_THERE)[:12], f.sha256[:12])
                        for f in files if held.get(f.path) != f.sha256 and (host, f.path) not in seen]
            seen |= {(host, f.path) for f in files}
        if phase.name == "engine":
            changes += [Change(h, "engine link", facts.get(h, NodeFacts()).engine, engine_link(c))
                        for h in engine_hosts(expansion) if facts.get(h, NodeFacts()).engine != engine_link(c)]
            moved = [ch.host for ch in changes if ch.what == "engine link"]
        job = slurm_job(c, phase)
        if job and check_jobs:
            path = sbatch_path(c, c.tier(phase.tier))
            script = next((f for fs in puts(expansion).values() for f in fs if f.path == path), None)
            controller = submit_host(expansion) or ""
            running = facts.get(controller, NodeFacts()).jobs.get(job, "")
            digest = slurmjob.script_digest(script.content) if script is not None else None
            if digest and running != digest:
                changes.append(Change(controller, f"job {job}", running or "not running",
                                      f"runs {posixpath.basename(script.path)} {digest}"))
        hosts = {h for step in expansion.steps for h in step.hosts}
        engine_moved = tuple(h for h in moved if h in hosts) if phase.is_tier else ()
        plans.append(PhasePlan(phase, changes, engine_moved))
    return plans


def phase_expansions(c: Cluster) -> list[tuple[Phase, Expansion]]:
    """Every phase with its runbook expanded for the cluster, in deploy order."""
    books, artifacts = available(), render_artifacts(c)
    return [(p, expand(books[p.runbook], c, p.tier, artifacts=artifacts)) for p in phases(c)]


def phase_hosts(c: Cluster, expansion: Expansion) -> list[str]:
    """The nodes a phase's deploy touches (a SLURM tier's controller too), in the file's order."""
    return [n.name for n in c.nodes if any(n.name in s.hosts for s in expansion.steps)]


def rollback_expansion(c: Cluster, phase: str, chosen: dict[str, list[gen.Generation]]) -> Expansion:
    """The run that puts back, per node, what the chosen generations replaced (newest first), then what the
    restored files need (systemd, nft) and the phase's reload where it is not a tier."""
    gdir, install_dir = c.storage.generations_dir, c.engine.install_dir
    per_host = {}
    for host, gens in chosen.items():
        paths = [p for g in gens for p in (*g.files, *g.created)]
        per_host[host] = [Command(gen.restore_command(gdir, g, install_dir), name=f"restore {g.id}") for g in gens]
        per_host[host] += [Command(command) for command in gen.after_restore(paths)]
        if phase in PHASE_RELOAD:
            per_host[host].append(Command(PHASE_RELOAD[phase]))
    return Expansion("rollback", f"Roll {phase} back", "", None,
                     [ExpandedStep("restore", "Put back the files and the engine link", "", per_host)])
