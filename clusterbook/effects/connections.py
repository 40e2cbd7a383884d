"""The one place a connection to the cluster's nodes is made, and the switches that forbid it: under --dry the
command-line adapter turns it off, so a dry run that tried to connect fails instead (tests run every --dry under
`unshare --net` as the second proof); with CLUSTERBOOK_LAB_ONLY set (the test suite and CI set it) only a lab
cluster, or one whose every node is on loopback, may be reached."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path

from clusterbook.effects.console import Failed
from clusterbook.effects.ssh import SshTransport
from clusterbook.model.schema import Cluster

_offline = [False]  # one command line at a time per process: invoke runs its tasks one after another


LAB_ONLY = "CLUSTERBOOK_LAB_ONLY"  # set on a development or CI machine: only the lab may be reached from it


class ConnectionUnderDry(Failed):
    """A --dry run asked for a connection: a bug in that task's dry path (exit status 1, no traceback)."""


class ConnectionNotToLab(Failed):
    """With CLUSTERBOOK_LAB_ONLY set, a live task named a cluster that is not a lab (exit status 1, no traceback)."""


def reachable_here(cluster: Cluster) -> bool:
    """What a machine with CLUSTERBOOK_LAB_ONLY may reach: a lab cluster, or one whose every address is loopback."""
    return cluster.cluster.kind == "lab" or all(ipaddress.ip_address(a).is_loopback
                                                for n in cluster.nodes for a in n.addresses.values())


@contextlib.contextmanager
def offline():
    """Within it, connect() refuses: the command line's --dry."""
    before, _offline[0] = _offline[0], True
    try:
        yield
    finally:
        _offline[0] = before


def connect(cluster: Cluster, base_dir: Path = Path(".")) -> SshTransport:
    """The transport to the cluster's nodes (OpenSSH, with the cluster's ssh_config)."""
    if _offline[0]:
        raise ConnectionUnderDry(f"--dry never connects, and something asked to reach {cluster.cluster.name}'s "
                                 "nodes: nothing was contacted (please report it: a task's dry run is incomplete)")
    if os.environ.get(LAB_ONLY) and not reachable_here(cluster):
        raise ConnectionNotToLab(f"{LAB_ONLY} is set here, so live tasks reach lab clusters only, and "
                                 f"{cluster.cluster.name} is a {cluster.cluster.kind} cluster: nothing was contacted "
                                 "(name the lab's file with --cluster lab/cluster.yaml)")
    return SshTransport(cluster, base_dir)
