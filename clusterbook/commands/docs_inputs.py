"""Everything one docs build needs, computed once from the cluster file: plans, files, runbook expansions."""

from __future__ import annotations

import json
import posixpath
import subprocess
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from clusterbook.commands.reportstamp import file_digest, report_for
from clusterbook.commands.settings import Settings
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.model.schema import Cluster
from clusterbook.pure import charts, layout
from clusterbook.pure import docpages as pages
from clusterbook.pure.apply_history import from_json
from clusterbook.pure.charts import node_pictures
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.operations import bringup, operations
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.residency import plan_residency
from clusterbook.pure.render.artifacts import Artifact, published, render_artifacts
from clusterbook.pure.runbooks import RUNBOOK_DIR, available, expand


@dataclass(frozen=True)
class RunbookDoc:
    runbook: str
    tier: str | None
    title: str
    page: str | None  # path under docs/; None when the runbook cannot run on this cluster
    markdown: str
    command: str
    unavailable: str = ""  # why there is no page


@dataclass(frozen=True)
class DocsInputs:
    cluster_file: str
    cluster: Cluster
    plans: dict[str, TierPlan]
    artifacts: list[Artifact]
    runbooks: list[RunbookDoc]
    pictures: dict[str, str]  # generated file name -> SVG text
    settings: Settings  # where its results come from: the reports and the apply records (runs/changes)
    history: dict[str, tuple[int, str]] = field(default_factory=dict)  # source file -> its last change


def build_stamp(site: DocsInputs, built_at: str) -> str:
    """The page footer: which cluster file (by the path given, and its digest) and when; docs.publish checks for it."""

    path = Path(site.cluster_file)
    try:  # never the build machine's checkout: relative to the working directory, else the file's name
        shown = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown = path.name
    return f"Built by clusterbook from {shown} (sha256 {file_digest(path)[:12]}) at {built_at}"


def built_at() -> str:
    """Now, as the footer of a site built now shows it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def build_docs_inputs(path: str, s: Settings) -> DocsInputs:
    """The site for a cluster file and its results' folders, recomputed when the file or a runbook changes
    (docs.serve reloads)."""
    files = [Path(path), *(Path(p) for p in parts_of(path)), *sorted(RUNBOOK_DIR.glob("*.yaml"))]
    stamp = tuple(p.stat().st_mtime_ns if p.exists() else None for p in files)
    return _build_docs_inputs(path, s, stamp)


@cache
def _build_docs_inputs(path: str, s: Settings, stamp: tuple) -> DocsInputs:
    c = load_cluster(path)
    books = available()
    # one page per operation this cluster offers (its tiers' managers decide which), plus status and logs
    first = bringup(c)  # the bring-up's pages first, in the order it runs; then every other operation's
    entries = [(op.runbook, op.tier, op.command, {}, pages.slug(op.runbook, op.tier))
               for op in first + [op for op in operations(c) if op not in first] if op.part is None]
    entries += [("status", None, "invoke status", {}, "status"), ("logs", None, "invoke logs", {}, "logs")]
    if c.gateway and c.gateway.docs_port:
        entries.append(("publish-docs", None, "invoke docs.publish", {"build_id": "BUILD-TIME"}, "publish-docs"))
    docs = []
    for runbook, tier, command, variables, slug in entries:
        try:
            extra = [packed_site(c, "(the site, packed by invoke docs.publish)")] if runbook == "publish-docs" else []
            expansion = expand(books[runbook], c, tier, variables=variables, artifacts=render_artifacts(c) + extra)
        except InputError as exc:  # not possible for this cluster: no page; the index says why
            reason = "; ".join(p.message for p in exc.problems)
            docs.append(RunbookDoc(runbook, tier, f"{runbook}{' ' + tier if tier else ''}", None, "", command,
                                   reason))
            continue
        body = pages.runbook_page(expansion)
        body = body.replace("\n", f"\n\nRun it with `{command}` (add `--dry` to print this plan).\n", 1)
        docs.append(RunbookDoc(runbook, tier, expansion.title, f"runbooks/{slug}.md", body, command))
    plans = plan_cluster(c)
    residency = plan_residency(c, plans)
    pictures = {}
    for narrow in (False, True):  # pages show the narrow drawing on a phone (docpages.picture)
        pictures.update({pages.picture_file(f"capacity-{node}", narrow): svg
                         for node, svg in node_pictures(residency, narrow).items()})
        pictures.update(result_pictures(s.reports, c, path, narrow))
    parts = parts_of(path)
    sources = [path, *parts, *(f"docs/{p.relative_to('docs').as_posix()}" for p in Path("docs").rglob("*.md")),
               *(f"runbooks/{p.name}" for p in RUNBOOK_DIR.glob("*.yaml"))]
    history = file_history(sources)
    newest = min((history[p] for p in [path, *parts] if p in history), default=None)  # the file with its parts
    if newest:
        history[path] = newest
    return DocsInputs(path, c, plans, published(c, render_artifacts(c)), docs, pictures, s, history)


def parts_of(path: str) -> list[str]:
    """The files of the cluster file's parts, each as the cluster file's own path is written (cluster.d/x.yaml
    beside cluster.yaml): a page's "last changed" counts the newest of the file and its parts as the file's."""
    return [posixpath.normpath(posixpath.join(posixpath.dirname(path), name)) for name in load_cluster(path).parts]


def file_history(paths: list[str]) -> dict[str, tuple[int, str]]:
    """Each file's last change as git knows it, keyed as given: (its rank, newest 0 and a file with uncommitted
    changes -1; `2026-11-27, commit abc1234`, `with uncommitted changes` where the working tree differs); a file
    outside the repository or its history is left out."""
    root = Path.cwd()
    inside = {}
    for given in paths:
        try:
            inside[Path(given).resolve().relative_to(root.resolve()).as_posix()] = given
        except ValueError:
            continue
    if not inside:
        return {}
    try:
        log = subprocess.run(["git", "log", "--format=@%h %cs", "--name-only", "--", *inside], cwd=root,
                             capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *inside], cwd=root, capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if log.returncode != 0:
        return {}
    out: dict[str, tuple[int, str]] = {}
    rank, commit = 0, ""
    for line in log.stdout.splitlines():
        if line.startswith("@"):
            short, date = line[1:].split(" ", 1)
            rank, commit = rank + 1, f"{date}, commit {short}"
        elif line in inside and inside[line] not in out:
            out[inside[line]] = (rank, commit)
    for line in dirty.stdout.splitlines():
        name = line[3:].strip()
        if name in inside:
            before = out.get(inside[name], (0, "never committed"))[1]
            out[inside[name]] = (-1, before + ", with uncommitted changes")
    return out


GPU_LOAD_TIMES = Path("benchmarks/results/h100x2-load-time")  # measured on the device machine (benchmarks/README.md)


def _matching(reports: Path, name: str, c: Cluster, path: str) -> dict | None:
    """A report's JSON when its summary measured this cluster file as it is now (the stamp), else None."""
    summary, data = reports / f"{name}-summary.md", reports / f"{name}.json"
    if not (summary.exists() and data.exists()) or report_for(summary.read_text(), c.cluster.name, path)[0] is None:
        return None
    return json.loads(data.read_text())


def result_pictures(reports: Path, c: Cluster, path: str, narrow: bool = False) -> dict[str, str]:
    """The results pages' pictures: this cluster's own bench and recovery reports (only when they measured this
    very file), and the GPU load times of benchmarks/, labelled with their card; drawn wide, or narrow for a phone."""


    out = {}
    bench = _matching(reports, "bench", c, path)
    if bench and bench.get("concurrency"):
        targets = c.targets_for(bench["tier"])
        target = targets.decode_tps.target if targets and targets.decode_tps else None
        out[pages.picture_file("bench", narrow)] = charts.concurrency_chart(
            bench["concurrency"], bench.get("decode_bound_tps"), target,
            f"{bench['tier']} on {c.cluster.name}: decode speed by clients ({bench['started']})", narrow)
    recovery = _matching(reports, "bench-recovery", c, path)
    if recovery and recovery.get("runs"):
        out[pages.picture_file("bench-recovery", narrow)] = charts.recovery_chart(
            recovery["runs"], recovery["predicted"]["recovery_s"], recovery.get("target_s"),
            f"{recovery['tier']} on {c.cluster.name} ({recovery['card']}): each recovery's phases", narrow)
    loads = GPU_LOAD_TIMES / "load-times.json"
    if loads.exists():
        gpus = [line.split(",")[1].strip() for line in (GPU_LOAD_TIMES / "gpus.txt").read_text().splitlines()
                if line.strip()]
        card = f"{len(gpus)} x {gpus[0]} (the device machine, not this cluster)"
        out[pages.picture_file("gpu-load-times", narrow)] = charts.load_time_chart(json.loads(loads.read_text()), card,
                                                                                 narrow)
    return out


def result_picture(name: str, site: DocsInputs, caption: str) -> str:
    """Markdown for one of the results pictures, or nothing when this site has none of that kind."""
    return f"{pages.picture(caption, name)}\n" if pages.picture_file(name) in site.pictures else ""


def packed_site(c: Cluster, packed: str) -> Artifact:
    """The built site as one upload for the gateway: a gzipped tar, base64 (uploads are text)."""
    return Artifact(c.gateway.node, layout.path(c, "site_archive"), packed, "archive", about="the docs site, packed",
                    id="site_archive")


REPORTS = {  # report name: (what "not yet …" says, the task that writes it)
    "verify": ("verified", "invoke verify"),
    "bench": ("benched", "invoke bench"),
    "bench-recovery": ("timed through a recovery", "invoke bench.recovery"),
    "bench-faults": ("put through faults with clients", "invoke bench.faults"),
    "fabric": ("measured", "invoke fabric"),
}


def latest_report(name: str, site: DocsInputs) -> str:
    """The newest report of a kind (verify, bench, bench-recovery) as Markdown when it measured this site's cluster
    file as it is; otherwise a sentence that says so (one cluster's results never appear on another's site)."""
    done, task = REPORTS[name]
    path = site.settings.reports / f"{name}-summary.md"
    cluster = site.cluster.cluster.name
    if not path.exists():
        return f"Not yet {done} on {cluster}: no {name} report (run `{task}`)."
    text, why = report_for(path.read_text(), cluster, site.cluster_file)
    return text if text is not None else f"Not yet {done} on {cluster}: {why} (run `{task}`)."


def change_records(runs: Path, cluster_name: str) -> list:
    """The apply records of this cluster kept in runs/changes/<cluster>/ (a record that does not parse is skipped)."""


    records = []
    for path in sorted((runs / "changes" / cluster_name).glob("*.json")):
        try:
            records.append(from_json(path.read_text()))
        except (json.JSONDecodeError, TypeError, KeyError):
            continue
    return records
