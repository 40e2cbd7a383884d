"""--dry never connects, by construction: one place builds a connection to the nodes (effects/connections.py),
and the command line turns it off under --dry (issue 45); the unshare --net tests stay the second proof."""

import re
from pathlib import Path

import pytest

from clusterbook.effects.connections import ConnectionUnderDry, connect, offline
from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parents[2]


def test_one_place_builds_a_connection():
    builders = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "clusterbook").rglob("*.py")
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(r"\bSshTransport\(", line) and not line.startswith("class ")]
    assert len(builders) == 1 and builders[0].startswith("clusterbook/effects/connections.py:"), builders


def test_under_dry_a_connection_is_refused_and_after_it_allowed():
    cluster = load_cluster(ROOT / "lab/cluster.yaml")
    with offline():
        with pytest.raises(ConnectionUnderDry, match="--dry never connects"):
            connect(cluster)
    assert isinstance(connect(cluster), SshTransport)


@pytest.mark.parametrize("file, reachable", [("cluster.yaml", False), ("tests/clusters/ridge.yaml", False),
                                             ("lab/cluster.yaml", True), ("lab/cluster-slurm.yaml", True),
                                             ("tests/clusters/rehearsal-cpu.yaml", True)])
def test_with_lab_only_set_a_live_task_reaches_the_labs_and_loopback_only(monkeypatch, file, reachable):
    """The suite and CI set CLUSTERBOOK_LAB_ONLY: a live task that named beefcake2's file (or any cluster that is
    neither a lab nor on loopback) fails before a name is looked up; the operator's machine leaves it unset."""
    from clusterbook.effects.connections import LAB_ONLY, ConnectionNotToLab

    cluster = load_cluster(ROOT / file)
    monkeypatch.setenv(LAB_ONLY, "1")
    if reachable:
        assert isinstance(connect(cluster), SshTransport)
    else:
        with pytest.raises(ConnectionNotToLab, match="nothing was contacted"):
            connect(cluster)
    monkeypatch.delenv(LAB_ONLY)
    assert isinstance(connect(cluster), SshTransport)  # the operator's machine: the cluster in its file


def test_the_suite_runs_with_lab_only_set():
    import os

    from clusterbook.effects.connections import LAB_ONLY

    assert os.environ.get(LAB_ONLY) == "1"
