"""The accept-folder command: the admin records, once, that a folder which already holds files is clusterbook's (its
marker is written on each node that holds it, after the same checks as every claim: no package's, not a link, owned
by root or the connecting user, not writable by every user)."""

from __future__ import annotations

import getpass
import socket
from concurrent.futures import ThreadPoolExecutor

from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import Refused
from clusterbook.pure import ownership


def accept_folder(cluster_file: str, folder: str | None, dry: bool = False) -> None:
    """Mark FOLDER as clusterbook's on every node that holds it (one of the file's roots; --dry: say what would
    run, contacting nothing)."""
    cluster = load_cluster(cluster_file)
    roots = ownership.owned_roots(cluster)
    if folder not in roots:
        listed = ", ".join(roots)
        if dry and folder is None:
            console.print(f"the folders clusterbook owns in {cluster_file}: {listed}; give --folder to accept one")
            return
        raise Refused(f"--folder {folder or '(none)'}: give one of the folders clusterbook owns in {cluster_file}: "
                      f"{listed}")
    nodes = [n.name for n in cluster.nodes if folder in ownership.roots_on(cluster, n.name)]
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    if dry:
        console.print(f"would mark {folder} as clusterbook's on {', '.join(nodes)} ({ownership.MARKER}: accepted by "
                      f"{who}), where no package owns it and it is a folder (not a link) owned by root or the user "
                      "clusterbook connects as, which not every user may write; nothing was contacted or changed")
        return
    transport = connect(cluster)
    command = ownership.command([folder], "accept", who)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        results = dict(zip(nodes, pool.map(lambda n: transport.run(n, command, timeout=60), nodes)))
    for node, result in results.items():
        if result.ok:
            console.print(result.stdout.strip() or f"{node}: {folder} is clusterbook's")
    failed = [(n, r) for n, r in results.items() if not r.ok]
    if failed:
        node, r = failed[0]
        raise Failed(f"{node}: accept-folder {folder}: owned_root accept exited {r.returncode}; end of stderr:\n"
                     f"{r.tail(5) or '(empty)'}")
