"""Shared fixtures: paths of the cluster files used across the suite."""

from pathlib import Path

import pytest

from clusterbook.loader import load_cluster

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
