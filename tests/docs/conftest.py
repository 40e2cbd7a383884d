"""The sites the docs tests read, each built once per run."""

import resource

import pytest

from .test_site import build


@pytest.fixture(scope="session")
def beefcake2_site(tmp_path_factory):
    """beefcake2's site, and the CPU seconds its build took (this process's and its programs': in a full run it
    shares two cores with six labs, and its wall time said more about them than about the build)."""
    out = tmp_path_factory.mktemp("site-beefcake2")
    started = cpu_seconds()
    build("cluster.yaml", out)
    return out, cpu_seconds() - started


def cpu_seconds() -> float:
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.fixture(scope="session")
def ridge_site(tmp_path_factory):
    """The site of another cluster (tests/clusters/ridge.yaml)."""
    out = tmp_path_factory.mktemp("site-ridge")
    build("tests/clusters/ridge.yaml", out)
    return out
