"""Shared fixtures: paths of the cluster files used across the suite."""

from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = {
    "beefcake2": ROOT / "cluster.yaml",
    "ridge": ROOT / "tests/clusters/ridge.yaml",
    "mini": ROOT / "tests/clusters/mini.yaml",
}


@pytest.fixture(scope="session")
def beefcake2():
    return load_cluster(CLUSTERS["beefcake2"])


@pytest.fixture(scope="session")
def ridge():
    return load_cluster(CLUSTERS["ridge"])


def pytest_addoption(parser):
    group = parser.getgroup("clusterbook acceptance")
    group.addoption("--live-cluster", default=None,
                    help="run the acceptance scenarios (tests/features) against this live cluster file")
    group.addoption("--disruptive", action="store_true", default=False,
                    help="also run @disruptive scenarios (node restart, killed worker); always on for the lab")
    group.addoption("--tier", default=None,
                    help="only this tier, in the scenarios that check tiers one by one (@tier; invoke apply)")
    group.addoption("--verify-summary", default=None, help="write a Markdown summary of the scenarios here")


def pytest_ignore_collect(collection_path, config):
    """The acceptance scenarios talk to a live cluster: only with --live-cluster (invoke verify passes it)."""
    if "acceptance" in collection_path.parts and not config.getoption("--live-cluster"):
        return True
    return None
