"""The sites the docs tests read, each built once per run."""

import time

import pytest

from .test_site import build


@pytest.fixture(scope="session")
def beefcake2_site(tmp_path_factory):
    """beefcake2's site, and how long its build took."""
    out = tmp_path_factory.mktemp("site-beefcake2")
    started = time.monotonic()
    build("cluster.yaml", out)
    return out, time.monotonic() - started


@pytest.fixture(scope="session")
def ridge_site(tmp_path_factory):
    """The site of another cluster (tests/clusters/ridge.yaml)."""
    out = tmp_path_factory.mktemp("site-ridge")
    build("tests/clusters/ridge.yaml", out)
    return out
