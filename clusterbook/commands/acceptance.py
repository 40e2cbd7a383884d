"""Acceptance: run the scenarios against a live cluster, and the main job on the lab (demo)."""

from __future__ import annotations

from pathlib import Path

from ..console import Failed, console
from ..loader import load_cluster
from .lab import LAB_CLUSTER, lab_up
from .runbooks import run_runbook, tier_runbook
from .site import docs


def verify(cluster_file: str, disruptive: bool, only: str | None) -> None:
    """Run tests/features against the live cluster; write cucumber JSON, JUnit XML and a Markdown summary."""
    import subprocess
    import sys

    load_cluster(cluster_file)
    reports = Path("reports")
    reports.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "tests/acceptance", "--live-cluster", cluster_file,
            "-p", "no:cacheprovider",
            f"--cucumberjson={reports / 'verify.cucumber.json'}", f"--junitxml={reports / 'verify.junit.xml'}",
            "--verify-summary", str(reports / "verify-summary.md"), "-rA", "--tb=line", "-q"]
    if disruptive:
        argv.append("--disruptive")
    if only:
        argv += ["-k", only]
    proc = subprocess.run(argv)
    console.print(f"reports: {reports}/verify-summary.md, verify.cucumber.json, verify.junit.xml")
    if proc.returncode != 0:
        raise Failed(f"verify: scenarios failed (pytest exit status {proc.returncode}); "
                     f"see {reports}/verify-summary.md")


def demo() -> None:
    """The main job on the lab: boot it, install, fetch models, deploy both tiers, verify, build the docs."""
    import os

    os.environ["CLUSTERBOOK_CLUSTER"] = LAB_CLUSTER
    lab_up(LAB_CLUSTER)
    for runbook in ("install", "models", "router", "gateway"):
        run_runbook(runbook, LAB_CLUSTER)
    cluster = load_cluster(LAB_CLUSTER)
    for tier in cluster.tiers:
        run_runbook(tier_runbook(LAB_CLUSTER, tier.name, "deploy"), LAB_CLUSTER, tier.name)
    verify(LAB_CLUSTER, disruptive=True, only=None)
    docs(LAB_CLUSTER, "site")
    console.print("\n[bold green]The lab is up, deployed and verified.[/] Browse the docs with "
                  "[bold]invoke docs.serve --cluster lab/cluster.yaml[/] (http://127.0.0.1:8000), or open "
                  "site/index.html; the verify report is in reports/verify-summary.md.")
