"""Acceptance: run the scenarios against a live cluster, and the main job on the lab (demo)."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from clusterbook.commands import settings
from clusterbook.commands.docs_build import docs
from clusterbook.commands.lab import lab_up
from clusterbook.commands.preflight import preflight
from clusterbook.commands.runbooks import run_operation, run_runbook
from clusterbook.commands.settings import LAB_CLUSTER, Settings
from clusterbook.effects.console import Failed, console, waits
from clusterbook.effects.in_process import run_pytest
from clusterbook.effects.verified import mark_verified, remember_verified
from clusterbook.model.loader import load_cluster
from clusterbook.pure import packagedata
from clusterbook.pure.verifysummary import only_waiting


@dataclass(frozen=True)
class Scenario:
    """One scenario of the feature files, as an operator names it and as pytest-bdd names its test."""

    feature: str
    name: str
    tags: frozenset[str]

    @property
    def test_name(self) -> str:
        from pytest_bdd.scenario import make_python_name  # lazy, both: pytest-bdd only to list scenarios
        return "test_" + make_python_name(self.name)


def scenarios(features: Path = packagedata.FEATURES) -> list[Scenario]:
    from pytest_bdd.feature import get_features
    return [Scenario(f.name, s.name, frozenset(s.tags) | frozenset(f.tags))
            for f in get_features([str(features)]) for s in f.scenarios.values()]


def matching(all_scenarios: list[Scenario], only: str) -> list[Scenario]:
    """Scenarios whose name (or test name) contains `only` in any case, whose feature it names, or that carry it
    as a tag (with or without @)."""
    wanted = only.strip().casefold()
    tag = wanted.removeprefix("@")
    return [s for s in all_scenarios
            if wanted in s.name.casefold() or wanted in s.test_name or tag in {t.casefold() for t in s.tags}
            or wanted == s.feature.casefold()]


def verify(s: Settings, cluster_file: str, disruptive: bool, only: str | None) -> None:
    """Run the acceptance features against the live cluster; write cucumber JSON, JUnit XML and a Markdown summary."""

    load_cluster(cluster_file)
    reports = s.reports
    reports.mkdir(parents=True, exist_ok=True)
    argv = [str(packagedata.ACCEPTANCE), "--live-cluster", cluster_file,
            "-p", "no:cacheprovider",
            f"--cucumberjson={reports / 'verify.cucumber.json'}", f"--junitxml={reports / 'verify.junit.xml'}",
            "--verify-summary", str(reports / "verify-summary.md"), "-rA", "--tb=line", "-q"]
    if disruptive:
        argv.append("--disruptive")
    if only:
        chosen = matching(scenarios(), only)
        if not chosen:
            names = "\n  ".join(f"{sc.name}" + (f"  (@{', @'.join(sorted(sc.tags))})" if sc.tags else "")
                                 for sc in scenarios())
            raise Failed(f"no scenario matches '{only}'; give part of a name or a tag:\n  {names}")
        console.print(f"{len(chosen)} scenario(s) match '{only}': " + "; ".join(sc.name for sc in chosen))
        argv += ["-k", " or ".join(sorted({sc.test_name for sc in chosen}))]
    # a pytest session in this process; the scenarios' own tasks read these settings, this file among them
    session = run_pytest(argv, env=settings.as_environment(s, cluster=cluster_file))
    console.print(f"reports: {reports}/verify-summary.md, verify.cucumber.json, verify.junit.xml")
    if session.status != 0:
        results = reports / "verify-summary.json"
        if results.is_file() and only_waiting(json.loads(results.read_text())):  # nothing failed: VASP holds nodes
            waits(f"verify: every scenario that did not pass waits for a tier whose job waits for its nodes; "
                  f"verify again when it runs (see {reports}/verify-summary.md)")
            return
        raise Failed(f"verify: scenarios failed (pytest exit status {session.status}); "
                     f"see {reports}/verify-summary.md")
    if not only:  # every scenario passed: what the nodes run now is the state a rollback returns to
        try:
            remember_verified(cluster_file, load_cluster(cluster_file))
            marked = mark_verified(load_cluster(cluster_file))
            console.print(f"generations marked verified: {marked}" if marked else "")
        except Failed as exc:
            console.print(f"[dim]could not mark the generations verified: {exc}[/]")


class PhaseClock:
    """Where a long command's minutes went: each phase's seconds in order, told in one line at its end."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.times.append((name, time.monotonic() - started))

    def line(self) -> str:
        total = sum(seconds for _, seconds in self.times)
        return ("where the time went: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.times)
                + f"; {total // 60:.0f} min {total % 60:.0f} s in all")


def demo(s: Settings, cluster_file: str = LAB_CLUSTER, only: str | None = None) -> None:
    """The main job on the lab: boot it, preflight every node, build and install llama.cpp, fetch models, deploy
    every tier and the monitoring, verify (every scenario, or those `only` matches), build the docs."""

    s = replace(s, cluster=cluster_file)  # the lab's file for everything this command runs
    cluster = load_cluster(cluster_file)
    clock = PhaseClock()
    try:
        with clock.phase("lab up"):
            lab_up(s, cluster_file, slurm=bool(cluster.slurm_tiers))  # SLURM's tiers need SLURM
        with clock.phase("preflight"):
            preflight(cluster_file)  # every node, before anything starts
        for runbook in ("install", "models", "router", "gateway"):
            with clock.phase("llama.cpp build and install" if runbook == "install" else runbook):
                run_runbook(s, runbook, cluster_file)
        with clock.phase("tiers"):
            for tier in cluster.tiers:
                run_operation(s, cluster_file, "deploy", tier.name)
        if cluster.monitoring:  # after the tiers: it ends when Prometheus scrapes every one of them
            with clock.phase("monitoring"):
                run_runbook(s, "monitoring", cluster_file)
        try:  # a failed scenario still gets its docs: the results page is where the operator reads it
            with clock.phase("scenarios"):
                verify(s, cluster_file, disruptive=True, only=only)
            failure = None
        except Failed as exc:
            failure = exc
        with clock.phase("docs"):
            docs(s, cluster_file, "site")
    finally:  # also after a failure: where the minutes went, phase by phase (issue 69)
        console.print(clock.line())
    browse = (f"Browse the docs with [bold]invoke docs.serve --cluster {cluster_file}[/] (http://127.0.0.1:8000), "
              "or open site/index.html")
    if failure:
        console.print(f"\n[bold red]The lab is up and deployed, but verification failed.[/] {browse}: its "
                      "Results page shows each failed scenario with what was expected and measured "
                      f"(also {s.reports}/verify-summary.md).")
        raise failure
    console.print(f"\n[bold green]The lab is up, deployed and verified.[/] {browse}; the verify report is in "
                  f"{s.reports}/verify-summary.md.")
