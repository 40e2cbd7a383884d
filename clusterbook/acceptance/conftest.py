"""Acceptance fixtures: the options, the live cluster, its transport, recorded measurements, @disruptive gating,
the summary."""

import json
import time
from pathlib import Path

import pytest

from clusterbook.acceptance.steps.clients import *  # noqa: F403  the step definitions, one module per feature
from clusterbook.acceptance.steps.common import *  # noqa: F403
from clusterbook.acceptance.steps.distribution import *  # noqa: F403
from clusterbook.acceptance.steps.embeddings import *  # noqa: F403
from clusterbook.acceptance.steps.helpers import is_lab, waiting_tiers
from clusterbook.acceptance.steps.monitoring import *  # noqa: F403
from clusterbook.acceptance.steps.on_demand import *  # noqa: F403
from clusterbook.acceptance.steps.performance import *  # noqa: F403
from clusterbook.acceptance.steps.resilience import *  # noqa: F403
from clusterbook.acceptance.steps.rpc_workers import *  # noqa: F403
from clusterbook.acceptance.steps.serving import *  # noqa: F403
from clusterbook.acceptance.steps.slurm import *  # noqa: F403
from clusterbook.commands.reportstamp import stamped
from clusterbook.effects.connections import connect
from clusterbook.model.loader import load_cluster
from clusterbook.pure.verifysummary import summary_markdown

RESULTS: dict[str, dict] = {}


def pytest_addoption(parser):
    group = parser.getgroup("clusterbook acceptance")
    group.addoption("--live-cluster", default=None, help="run the acceptance scenarios against this live cluster file")
    group.addoption("--disruptive", action="store_true", default=False,
                    help="also run @disruptive scenarios (node restart, killed worker); always on for the lab")
    group.addoption("--tier", default=None,
                    help="only this tier, in the scenarios that check tiers one by one (@tier; invoke apply)")
    group.addoption("--verify-summary", default=None, help="write a Markdown summary of the scenarios here")


def pytest_collection_modifyitems(config, items):
    # disruptive scenarios last, so the others see a settled cluster
    items.sort(key=lambda item: "disruptive" in item.keywords)
    path = config.getoption("--live-cluster")
    if config.getoption("--disruptive") or (path and is_lab(path)):
        return
    skip = pytest.mark.skip(reason="disruptive: run with --disruptive (on by default for the lab)")
    for item in items:
        if "disruptive" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster_file(request):
    return request.config.getoption("--live-cluster")


@pytest.fixture(scope="session")
def cluster(cluster_file):
    return load_cluster(cluster_file)


@pytest.fixture(scope="session")
def tiers(cluster, request):
    """The tiers a scenario checks: every tier, or the one `--tier` names (apply verifies one tier at a time)."""
    name = request.config.getoption("--tier")
    chosen = [t for t in cluster.tiers if name in (None, t.name)]
    if not chosen:
        pytest.fail(f"--tier {name}: no such tier in the cluster file")
    return chosen


@pytest.fixture(scope="session")
def transport(cluster):
    return connect(cluster)  # the operator's files relative to the folder verify runs in, as every task's


@pytest.fixture
def measured(request):
    """Record a measured figure for the summary: measured("decode tok/s (reasoning)", 148.2)."""
    entry = RESULTS.setdefault(request.node.nodeid, {"measurements": {}})

    def record(name: str, value) -> None:
        entry["measurements"][name] = value
    return record


@pytest.fixture
def context():
    """Data passed from When steps to Then steps within one scenario."""
    return {}


def pytest_bdd_before_scenario(request, feature, scenario):
    entry = RESULTS.setdefault(request.node.nodeid, {"measurements": {}})
    entry.update(feature=feature.name, scenario=scenario.name, started=time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    entry = RESULTS.get(item.nodeid)
    if entry is None:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        entry["outcome"] = report.outcome
        if report.outcome == "failed":
            entry["message"] = str(report.longrepr.reprcrash.message) if hasattr(report.longrepr, "reprcrash") \
                else str(report.longrepr)[-500:]
            waits = waiting_now(item)
            if waits:  # VASP holds a tier's nodes: a normal day on its cluster, so the scenario waits, not fails
                entry["outcome"] = "waiting"
                entry["message"] = "; ".join(f"tier {t} waits for its nodes: {w}" for t, w in waits.items())
        elif report.outcome == "skipped":
            entry["message"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""


def waiting_now(item) -> dict[str, str]:
    """The SLURM tiers whose jobs wait for nodes other jobs hold, asked when a scenario failed (none: no SLURM). The
    cluster comes from the option, not the item's fixtures: a scenario's steps ask for theirs as they run, so the
    item does not hold them (the SLURM lab: every scenario of a waiting tier read as failed, and apply refused)."""
    try:
        cluster = load_cluster(item.config.getoption("--live-cluster"))
        if not any(t.manager == "slurm" for t in cluster.tiers):
            return {}
        return waiting_tiers(cluster, connect(cluster))
    except Exception:  # no file, or the controller does not answer: the failure stands as it is
        return {}


def pytest_sessionfinish(session):
    path = session.config.getoption("--verify-summary")
    cluster_file = session.config.getoption("--live-cluster")
    if not path or not cluster_file:
        return
    c = load_cluster(cluster_file)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = summary_markdown(c.cluster.name, cluster_file, c.engine.build, when, list(RESULTS.values()))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(stamped(text, c.cluster.name, cluster_file))
    Path(path).with_suffix(".json").write_text(json.dumps(list(RESULTS.values()), indent=2, default=str))
