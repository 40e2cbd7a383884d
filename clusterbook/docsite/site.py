"""Everything one docs build needs, computed once from the cluster file: plans, files, runbook expansions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..loader import load_cluster
from ..planner.capacity import TierPlan, plan_cluster
from ..problems import InputError
from ..render.artifacts import Artifact, render_artifacts
from ..runbooks import available, expand
from ..schema import Cluster
from . import pages

REPORTS = Path("reports")


@dataclass(frozen=True)
class RunbookDoc:
    runbook: str
    tier: str | None
    title: str
    page: str  # path under docs/
    markdown: str
    command: str


@dataclass(frozen=True)
class Site:
    cluster_file: str
    cluster: Cluster
    plans: dict[str, TierPlan]
    artifacts: list[Artifact]
    runbooks: list[RunbookDoc]


def cluster_file() -> str:
    return os.environ.get("CLUSTERBOOK_CLUSTER", "cluster.yaml")


def build_site(path: str) -> Site:
    """The site for a cluster file, recomputed when the file or a runbook changes (docs.serve reloads)."""
    from ..runbooks import RUNBOOK_DIR
    stamp = tuple(p.stat().st_mtime_ns for p in [Path(path), *sorted(RUNBOOK_DIR.glob("*.yaml"))])
    return _build_site(path, stamp)


@cache
def _build_site(path: str, stamp: tuple) -> Site:
    c = load_cluster(path)
    docs = []
    for book in available().values():
        rb = book.runbook
        tiers = [t.name for t in c.tiers if t.kind in rb.kinds] if rb.scope == "tier" else [None]
        for tier in tiers:
            slug = pages.slug(rb.id, tier)
            command = pages.runbook_command(rb.id, tier)
            try:
                expansion = expand(book, c, tier)
                body = pages.runbook_page(expansion)
                title = expansion.title
            except InputError as exc:
                title = f"{rb.id}{' ' + tier if tier else ''} (not available)"
                body = f"# {title}\n\nThis runbook cannot be expanded for this cluster:\n\n" + \
                       "\n".join(f"- {p.message}" for p in exc.problems) + "\n"
            body = body.replace("\n", f"\n\nRun it with `{command}` (add `--dry` to print this plan).\n", 1)
            docs.append(RunbookDoc(rb.id, tier, title, f"runbooks/{slug}.md", body, command))
    return Site(path, c, plan_cluster(c), render_artifacts(c), docs)


def latest_report(name: str) -> str | None:
    """The newest report of a kind (verify, bench) as Markdown, if one was written."""
    path = REPORTS / f"{name}-summary.md"
    return path.read_text() if path.exists() else None
