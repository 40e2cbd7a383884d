"""The one place a connection to the cluster's nodes is made, and the switch that forbids it: under --dry the
command-line adapter turns it off, so a dry run that tried to connect fails instead (tests run every --dry under
`unshare --net` as the second proof)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from clusterbook.effects.console import Failed
from clusterbook.effects.ssh import SshTransport
from clusterbook.model.schema import Cluster

_offline = [False]  # one command line at a time per process: invoke runs its tasks one after another


class ConnectionUnderDry(Failed):
    """A --dry run asked for a connection: a bug in that task's dry path (exit status 1, no traceback)."""


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
    return SshTransport(cluster, base_dir)
