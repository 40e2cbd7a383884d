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
