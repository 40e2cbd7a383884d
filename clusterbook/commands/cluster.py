"""Commands on the cluster file itself: validate and check, render, plan, the README reference."""

from __future__ import annotations

import difflib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import get_args

from rich.markup import escape
from rich.table import Table

from clusterbook.commands import acceptance
from clusterbook.commands.arguments import tier_named
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.files import write_tree
from clusterbook.effects.ssh import CONTROL_DIR, ssh_config_text
from clusterbook.effects.validators import MissingTools, validate
from clusterbook.model.fixlint import criteria_findings
from clusterbook.model.loader import load_cluster, load_cluster_document
from clusterbook.model.problems import InputError, Problem
from clusterbook.model.schema import CacheType
from clusterbook.pure.fixsteps import fix_findings
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.planner import solver
from clusterbook.pure.planner.capacity import GIB, plan_json
from clusterbook.pure.planner.findings import plan_findings
from clusterbook.pure.planner.loadtime import load_json, recovery_text
from clusterbook.pure.planner.prompt import prompt_estimate
from clusterbook.pure.planner.residency import exclusion_text, plan_residency, residency_json
from clusterbook.pure.reference import reference_markdown, splice
from clusterbook.pure.render.artifacts import path_collisions, render_artifacts
from clusterbook.pure.render.monitoring import alert_destinations, alert_findings
from clusterbook.pure.runbooks import models_for_host


def render(cluster_file: str, out_dir: str) -> None:
    """Write every generated file under out_dir/<node>/<target path>."""
    cluster = load_cluster(cluster_file)
    artifacts = render_artifacts(cluster)
    paths = write_tree(artifacts, Path(out_dir))
    table = Table("node", "file", "what", title=f"{cluster.cluster.name}: {len(paths)} files in {out_dir}/")
    for a in artifacts:
        table.add_row(a.node, a.path, a.about)
    console.print(table)


def checked_cluster(cluster_file: str):
    """The cluster, valid by the schema, the cross-field rules and its capacity plan; else InputError."""
    cluster, doc = load_cluster_document(cluster_file)
    findings = (plan_findings(cluster, plan_cluster(cluster)) + path_collisions(cluster, render_artifacts(cluster))
                + fix_findings(cluster) + alert_findings(cluster)
                + criteria_findings(cluster, {s.name for s in acceptance.scenarios()}))
    if any(path[:2] == ("planner", "co_reside") for path, _ in findings):  # name the placement that keeps them
        hint = placement_hint(cluster)
        findings = [(path, f"{message}; {hint}" if hint and path[:2] == ("planner", "co_reside") else message)
                    for path, message in findings]
    if findings:
        raise InputError([doc.problem(path, message) for path, message in findings])
    return cluster


def check(cluster_file: str) -> None:
    """Validate the cluster file and every rendered file with the real tools; exit 1 on any failure."""
    cluster = checked_cluster(cluster_file)
    console.print(f"[green]ok[/] {cluster_file}: schema, cross-field rules and capacity plan")
    if hint := placement_hint(cluster):
        console.print(f"[yellow]hint[/]: {escape(hint)}")
    if cluster.monitoring and not alert_destinations(cluster):
        console.print(f"[yellow]hint[/]: alerts reach no one yet ({escape(cluster.monitoring.alerts_unrouted)} "
                      "accepts it): give monitoring.alert_webhook or monitoring.alert_email")
    try:
        verdicts = validate(render_artifacts(cluster))
    except MissingTools as exc:
        raise Failed(str(exc)) from None
    table = Table("result", "node", "file", "validator", title="rendered files")
    for v in verdicts:
        table.add_row("[green]ok[/]" if v.ok else "[red]FAIL[/]", v.node, v.path, v.validator)
    console.print(table)
    failed = [v for v in verdicts if not v.ok]
    for v in failed:
        console.print(f"[red]{v.node}:{v.path}[/] ({v.validator}):\n{escape(v.output)}", markup=True)
    if failed:
        raise Failed(f"{len(failed)} of {len(verdicts)} checks failed")
    console.print(f"[green]all {len(verdicts)} checks passed[/]")


def write_reference(readme: str) -> None:
    """Regenerate the cluster file reference between the README's markers."""
    path = Path(readme)
    path.write_text(splice(path.read_text(), reference_markdown()))
    console.print(f"[green]updated[/] the cluster file reference in {readme}")


def plan(cluster_file: str, tier: str | None, as_json: bool, models_dir: str | None, solve: bool = False,
         min_ctx: int | None = None, cache_types: list[str] | None = None) -> None:
    """Print the capacity plan of every tier (or one) as tables, or as JSON; with solve, the best placements."""

    if solve:
        return solve_placements(cluster_file, as_json, min_ctx, cache_types)
    cluster = load_cluster(cluster_file)
    plans = plan_cluster(cluster, Path(models_dir) if models_dir else None)
    if tier:
        tier_named(cluster, tier)
    chosen = [plans[tier]] if tier else list(plans.values())
    cplan = plan_residency(cluster, plans)
    if as_json:
        tiers = [{**plan_json(p), "load": load_json(cluster, cluster.tier(p.tier), p)} for p in chosen]
        print(json.dumps({"tiers": tiers, "cluster": residency_json(cplan)}, indent=2))
        return
    for p in chosen:
        slots = cluster.tier(p.tier).parallel  # llama-server gives each slot ctx_size / parallel
        per_request = f"; {p.ctx // slots:,} per request in {slots} slots" if slots > 1 else ""
        table = Table("device", "node", "blocks", "weights", "KV cache", "compute", "pool", "overhead", "total",
                      "usable",
                      "headroom", title=f"tier {p.tier}: {p.model} at {p.ctx:,} tokens ({p.shape_source} shape"
                                        f"{per_request})")
        for d in p.devices:
            gib = lambda b: f"{b / GIB:.2f} GiB" if b is not None else "-"  # noqa: E731
            head = gib(d.headroom) if d.headroom is None or d.headroom >= 0 else f"[red]{gib(d.headroom)}[/]"
            table.add_row(d.device, d.node, f"{d.blocks}{' + out' if d.output else ''}", gib(d.weights), gib(d.kv),
                          gib(d.compute), gib(d.pool), gib(d.overhead), gib(d.total), gib(d.capacity), head)
        console.print(table)
        facts = [f"fits: {'[green]yes[/]' if p.fits else '[red]no[/]'}"]
        if p.max_ctx is not None:
            facts.append(f"largest context that fits: {p.max_ctx:,}")
        if p.decode_bound_tps:
            facts.append(f"decode bound: {p.decode_bound_tps:.1f} tok/s (empty context)")
        if p.decode_bound_full_ctx_tps:
            facts.append(f"{p.decode_bound_full_ctx_tps:.1f} tok/s (full context)")
        if p.flash:
            facts.append(f"with flash attention and a {p.flash.cache_type_k} K and V cache: {p.flash.ctx:,} tokens fit")
        prompt = prompt_estimate(cluster, cluster.tier(p.tier), p)
        if prompt:
            facts.append(f"a full prompt ({prompt.tokens:,} tokens): {prompt.seconds:,.0f} s to its first token")
        console.print("  " + " · ".join(facts + p.notes))
        if cluster.tier(p.tier).workers:
            console.print("  " + recovery_text(cluster, cluster.tier(p.tier), p))
    if not tier:
        _print_residency(cplan)


def solve_placements(cluster_file: str, as_json: bool, min_ctx: int | None,
                     cache_types: list[str] | None = None) -> None:
    """`invoke plan --solve`: the best placements beside the file's own, and the change to the file for the best."""

    cluster, doc = load_cluster_document(cluster_file)
    if min_ctx is not None and not 256 <= min_ctx <= 16_777_216:
        raise InputError([Problem((), f"--min-ctx {min_ctx}: a context is 256 to 16,777,216 tokens",
                                  file=cluster_file)])
    known = get_args(CacheType)
    unknown = [t for t in cache_types or [] if t not in known]
    if unknown:
        raise InputError([Problem((), f"--cache-types {','.join(unknown)}: expected KV cache types among "
                                      f"{', '.join(known)}", file=cluster_file)])
    floors = {t.name: min_ctx for t in cluster.tiers} if min_ctx else None
    current = solver.judge(cluster, {})
    found = solver.solve(cluster, floors, cache_types=cache_types)
    if not any(p.feasible for p in found):
        why = "; ".join(found[0].problems[:3]) if found else "no placement to judge"
        raise InputError([Problem((), "no placement fits every tier on its devices"
                                  + (f" even at --min-ctx {min_ctx}" if min_ctx else "") + f": {why}",
                                  file=cluster_file)])
    text = Path(cluster_file).read_text()
    edited = solver.yaml_edit(text, cluster, doc.lines, found[0].changes) if found and found[0].changes else None
    diff = "".join(difflib.unified_diff(text.splitlines(True), edited.splitlines(True), cluster_file,
                                        f"{cluster_file} (solved)")) if edited else ""
    if as_json:
        print(json.dumps({"current": current.as_json(), "placements": [p.as_json() for p in found], "diff": diff},
                         indent=2))
        return
    console.print(f"[bold]placements of {cluster.cluster.name}[/], the file's first, then the best found:")
    for label, p in [("file", current), *((str(i), p) for i, p in enumerate(found, 1))]:
        changes = "; ".join(f"{t}: " + ", ".join(f"{k}={solver._flow(v)}" for k, v in ch.items())
                            for t, ch in p.changes.items()) or "as the file"
        console.print(f"[bold]{label:>4}[/] {'[green]serves at once[/]' if p.serving_together else '[red]one waits[/]'}"
                      f"{'' if p.feasible else ' · [red]does not fit[/]'} · targets met {p.targets_met} · decode "
                      + ", ".join(f"{k} {v:.1f}" for k, v in p.decode_tps.items()) + " tok/s · recovery "
                      + ", ".join(f"{k} {v:.0f}" for k, v in p.recovery_s.items())
                      + " s · slots " + ", ".join(f"{k} {n} × {p.slot_ctx[k]:,}" for k, n in p.slots.items())
                      + f" tokens · least GPU headroom {p.headroom_gib:.2f} GiB"
                      + ("".join(f" · [yellow]one preemption takes {escape(s)}[/]" for s in p.preempted_together))
                      + f"\n     {escape(changes)}", markup=True,
                      highlight=False)
    if diff:
        console.print(f"the change for placement 1 (comments kept):\n{diff}", markup=False, highlight=False)
    elif found and not found[0].changes:
        console.print("the file's own placement is the best the solver found")
    elif found:
        console.print("no diff for placement 1: a key it changes is written over several lines in the file (block "
                      "style); write the values shown above on that key's line")
    if found and not found[0].serving_together:
        console.print("no placement lets every tier serve at the same time: " + escape("; ".join(found[0].waits)))


def placement_hint(cluster) -> str | None:
    """A better placement than the file's, in one line, for `invoke check` (a hint: the file stays as written)."""
    current = solver.judge(cluster, {})
    found = solver.solve(cluster, best=1)
    if not found or not solver.better(current, found[0]):
        return None
    what = "; ".join(f"{t}: " + ", ".join(f"{k}={solver._flow(v)}" for k, v in ch.items())
                     for t, ch in found[0].changes.items())
    best = found[0]
    why = ("planner.co_reside's groups serve together" if best.co_resides and not current.co_resides else
           "every tier serves at the same time" if best.serving_together and not current.serving_together else
           "every tier fits with the planner's margin" if not current.feasible else "more targets are met")
    return f"a better placement exists ({why}): {what}; `invoke plan --solve` shows it and the change to the file"


def _print_residency(cplan) -> None:
    """The whole cluster: which tiers run at the same time, and every device's worst load."""
    table = Table("node", "device", "resident at once", "total", "usable", "headroom",
                  title="the whole cluster: what is resident at the same time (worst case)")
    for load in cplan.loads:
        head = f"{load.headroom / GIB:.2f} GiB"
        table.add_row(load.slot.node, load.slot.device + (f" ({load.slot.model})" if load.slot.model else ""),
                      ", ".join(f"{s.tier} {s.what} {s.total / GIB:.2f}" for s in load.shares),
                      f"{load.total / GIB:.2f} GiB", f"{load.slot.capacity / GIB:.2f} GiB",
                      head if load.fits else f"[red]{head}[/]")
    console.print(table)
    console.print("  run at the same time: " + "; ".join(" + ".join(g) for g in cplan.groups))
    for sentence in exclusion_text(cplan):
        console.print(f"  [yellow]{escape(sentence)}[/]")


def ssh_config(cluster_file: str, out: str | None) -> None:
    """The ssh_config with a Host entry per node (its name) and jump host, as clusterbook itself connects: printed,
    or written to OUT for `Include` in ~/.ssh/config (the docs' `ssh NODE …` lines use these names)."""
    cluster = load_cluster(cluster_file)
    text = ssh_config_text(cluster, Path.cwd())
    if not out:
        print(text, end="")
        return
    path = Path(out).expanduser()
    if path.exists() and not path.read_text(errors="replace").startswith("# Generated by clusterbook"):
        raise Failed(f"{path} exists and clusterbook did not write it: choose another file")
    path.parent.mkdir(parents=True, exist_ok=True)
    CONTROL_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)  # its ControlPath
    path.write_text(text)
    console.print(f"[green]wrote[/] {path}: {len(cluster.nodes)} nodes by name; make `Include {out}` the first line "
                  "of ~/.ssh/config")


def models_hash(cluster_file: str) -> None:
    """Each model's sha256, computed where it lies (on a node that serves it), beside the cluster file's."""


    cluster = load_cluster(cluster_file)
    holder = {}
    for node in cluster.nodes:
        for model in models_for_host(cluster, node.name):
            holder.setdefault(model.id, node.name)
    transport = connect(cluster)

    def one(model_id: str) -> tuple[str, str, str]:
        model, node = cluster.model(model_id), holder[model_id]
        out = transport.run(node, f"sha256sum {cluster.storage.models_dir}/{model.file}", timeout=3600)
        return model_id, node, out.stdout.split()[0] if out.ok and out.stdout else f"(not there: {out.tail(1)})"

    with console.status(f"sha256 of {len(holder)} model file(s) on their nodes …"), \
            ThreadPoolExecutor(max_workers=max(1, len(holder))) as pool:
        rows = list(pool.map(one, holder))
    table = Table("model", "node", "sha256", "cluster file", title="model checksums")
    wrong = []
    for model_id, node, digest in rows:
        declared = cluster.model(model_id).sha256
        verdict = "not declared" if not declared else "[green]same[/]" if declared == digest else "[red]DIFFERS[/]"
        if declared and declared != digest:
            wrong.append(f"{model_id} on {node}: {digest}, the cluster file says {declared}")
        table.add_row(model_id, node, digest, verdict)
    console.print(table)
    console.print("To paste under each model in the cluster file:")
    for model_id, _node, digest in rows:
        if len(digest) == 64:
            console.print(f"  - id: {model_id}\n    sha256: {digest}", markup=False, highlight=False)
    if wrong:
        raise Failed("model files differ from their declared sha256: " + "; ".join(wrong))
