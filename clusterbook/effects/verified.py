"""The verified generation: what the nodes ran when the scenarios last passed (the cluster file, kept here, and
each node's generations marked verified), the state `invoke rollback` returns to."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed
from clusterbook.model.schema import Cluster
from clusterbook.pure import generations as gen


def state_dir(cluster: Cluster) -> Path:
    """This checkout's record of a cluster: deployed/ (the last content uploaded per node and path, the base of
    --dry diffs), engine/ (each node's engine link after the last install), verified/ (see verified_file)."""
    return Path(".clusterbook") / cluster.cluster.name


def verified_file(cluster: Cluster, cluster_file: str) -> Path:
    """The cluster file as it was when the scenarios last passed (verify, or a landed apply): what a rollback
    returns to, so the scenarios before a change and after a rollback check against it. Kept per cluster and
    generations folder, the nodes' own record of what they run (the lab's two files describe the same machines
    under one name, each with its own generations), never per file name: the same edit saved under another name
    finds the same verified file."""
    folder = cluster.storage.generations_dir.strip("/").replace("/", "_") or "root"
    return state_dir(cluster) / "verified" / f"{folder}.yaml"


def remember_verified(cluster_file: str, cluster: Cluster) -> None:
    verified_file(cluster, cluster_file).parent.mkdir(parents=True, exist_ok=True)
    verified_file(cluster, cluster_file).write_bytes(Path(cluster_file).read_bytes())


def on_each(cluster: Cluster, hosts: list[str], command_of) -> dict[str, str]:
    """A command per host, in parallel, over SSH; each host's stdout (a failure ends the command, naming it)."""
    transport = connect(cluster)
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        results = list(pool.map(lambda h: transport.run(h, command_of(h), timeout=60), hosts))
    bad = [r for r in results if not r.ok]
    if bad:
        raise Failed(f"{bad[0].host}: {bad[0].command.splitlines()[0][:120]} exited {bad[0].returncode}\n"
                     f"{bad[0].tail() or '(no stderr)'}")
    return {r.host: r.stdout for r in results}


def listings(cluster: Cluster, hosts: list[str]) -> dict[str, list[gen.Generation]]:
    out = on_each(cluster, hosts, lambda h: gen.listing_command(cluster.storage.generations_dir))
    return {h: gen.parse_listing(text) for h, text in out.items()}


def mark_verified(cluster: Cluster, phases: set[str] | None = None) -> int:
    """Mark the applied generations of these phases (all when None) verified on every node; how many. A tier's
    scenarios passing does not verify the engine under it: other tiers run on it too (apply marks the engine
    once every phase landed)."""
    gdir = cluster.storage.generations_dir
    found = listings(cluster, [n.name for n in cluster.nodes])
    ids = {h: [g.id for g in gens if g.state == "applied" and (phases is None or g.phase in phases)]
           for h, gens in found.items()}
    ids = {h: i for h, i in ids.items() if i}
    if ids:
        on_each(cluster, list(ids), lambda h: gen.mark_command(gdir, ids[h], "verified"))
    return sum(len(i) for i in ids.values())


