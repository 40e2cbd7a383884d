"""The change log: what one `invoke apply` changed, the scenario runs before and after, any rollback; kept as JSON
under runs/changes/<cluster>/ and rendered as the site's Changes page (latest first). Pure."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from clusterbook.pure import kinds
from clusterbook.pure.docpages import table
from clusterbook.pure.generations import KEPT
from clusterbook.pure.operations import rollback_restart
from clusterbook.pure.phases import phases


@dataclass
class ScenarioRun:
    """One run of a phase's scenarios: when (before, after, after rollback), what passed, what failed, and what
    waits (it failed while its tier's job waits for nodes other jobs hold: VASP's, a normal day on beefcake2)."""

    when: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    report: str = ""  # the JUnit file
    waiting: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and bool(self.passed or self.waiting)


@dataclass
class Rollback:
    restored: list[dict]  # {host, generation, files, engine}
    seconds: float  # from the start of the rollback until the tier answered again
    answered: bool
    error: str | None = None


@dataclass
class PhaseRecord:
    phase: str
    changes: list[dict]  # {host, what, before, after}
    outcome: str = "pending"  # landed | waiting | rolled back | failed | not started (unhealthy before it) | skipped
    error: str | None = None
    scenarios: list[ScenarioRun] = field(default_factory=list)
    rollback: Rollback | None = None
    waiting: str | None = None  # deployed, its job waiting for nodes other jobs hold: kept, verified when it starts


@dataclass
class ChangeRecord:
    cluster: str
    cluster_file: str
    cluster_sha: str
    started: str  # UTC, ISO 8601
    seconds: float = 0.0
    outcome: str = "pending"  # landed | waiting | rolled back | failed
    phases: list[PhaseRecord] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def from_json(text: str) -> ChangeRecord:
    data = json.loads(text)
    phases = []
    for p in data.pop("phases", []):
        if "unit" in p:  # records written before the phase had its name
            p["phase"] = p.pop("unit")
        runs = [ScenarioRun(**s) for s in p.pop("scenarios", [])]
        rb = p.pop("rollback", None)
        phases.append(PhaseRecord(**p, scenarios=runs, rollback=Rollback(**rb) if rb else None))
    return ChangeRecord(**data, phases=phases)


def _runs(runs: list[ScenarioRun]) -> str:
    rows = [[r.when, str(len(r.passed)), str(len(r.failed)) if not r.failed else f"**{len(r.failed)}**",
             "; ".join(r.failed) or "-", f"{r.seconds:.0f}"] for r in runs]
    return table(["scenarios", "passed", "failed", "which failed", "s"], rows)


def changes_page(cluster: str, records: list[ChangeRecord]) -> str:
    """Every apply against this cluster from this checkout, the latest first."""
    mine = sorted((r for r in records if r.cluster == cluster), key=lambda r: r.started, reverse=True)
    if not mine:
        return (f"No `invoke apply` has run against the {cluster} cluster from the checkout that built this site; "
                "each apply adds an entry here.\n")
    out = []
    for r in mine:
        out.append(f"## {r.started} · {r.outcome}\n\n`{r.cluster_file}` (sha256 `{r.cluster_sha[:12]}`), "
                   f"{r.seconds:.0f} s.\n")
        for p in r.phases:
            out.append(f"### {p.phase}: {p.outcome}\n")
            if p.changes:
                out.append(table(["node", "what", "before", "after"],
                                 [[c["host"], f"`{c['what']}`", c["before"], c["after"]] for c in p.changes]) + "\n")
            if p.error:
                out.append("The deploy failed:\n\n```text\n" + p.error.strip() + "\n```\n")
            if p.waiting:  # a normal day on a cluster that runs VASP first: kept, verified once the job starts
                out.append("Deployed; its job waited for nodes other jobs held (kept, not rolled back):\n\n```text\n"
                           + p.waiting.strip() + "\n```\n")
            if p.scenarios:
                out.append(_runs(p.scenarios) + "\n")
            if p.rollback:
                rb = p.rollback
                restored = "; ".join(f"{x['host']}: {x['generation']} ({len(x['files'])} file(s)"
                                     + (f", engine back to {x['engine']}" if x.get("engine") else "") + ")"
                                     for x in rb.restored) or "nothing recorded"
                state = (f"answered again after {rb.seconds:.1f} s" if rb.answered
                         else f"did not answer again ({rb.error or 'see the run log'})")
                out.append(f"Rolled back: {restored}; the tier {state}.\n")
    return "\n".join(out)


def apply_overview(c) -> str:
    """How apply and rollback work on this cluster: its phases in order, what checks each, how each tier restarts."""

    tag = {"tier": "`@tier` scenarios, narrowed to the tier", "router": "`@router` scenario",
           "gateway": "`@gateway` scenario", "monitoring": "`@monitoring` scenario"}
    rows = []
    for p in phases(c):
        if p.tier:
            op = rollback_restart(c.tier(p.tier))
            back = (f"files back, then `{op.runbook}`" + (f" (its {op.part} steps)" if op.part else "")
                    + (" (the job submitted again from the restored script)" if c.tier(p.tier).manager == "slurm"
                       else kinds.of(c.tier(p.tier)).restart_order))
        else:
            back = "files (and the engine link) back" if p.name == "engine" else "files back"
        rows.append([p.name, f"`{p.runbook}`", tag.get(p.scenarios or "", "the tiers' scenarios after it"), back])
    return (table(["phase", "runbook", "checked by", "on failure"], rows)
            + f"\nEach node keeps its newest {KEPT} generations in `{c.storage.generations_dir}`.\n")
