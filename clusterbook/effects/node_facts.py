"""What the nodes hold, as `invoke apply` compares it with the cluster file: read from the nodes (one command per
node), or, for --dry, from what the last deploys from this checkout recorded."""

from __future__ import annotations

import hashlib

from clusterbook.effects.verified import on_each, state_dir
from clusterbook.model.schema import Cluster
from clusterbook.pure import phases as ch
from clusterbook.pure import slurmjob
from clusterbook.pure.runbooks import Expansion


def live_facts(cluster: Cluster, exps: list[tuple[ch.Phase, Expansion]]) -> dict[str, ch.NodeFacts]:
    """What the nodes hold now: one command per node (sha256 of every file the phases put there, the engine link,
    the running jobs' script digests on the controller)."""
    paths: dict[str, dict[str, None]] = {}  # per host, each path once, in order
    jobs: dict[str, dict[str, str]] = {}
    for phase, expansion in exps:
        for host, files in ch.puts(expansion).items():
            paths.setdefault(host, {}).update(dict.fromkeys(f.path for f in files))
        if (job := ch.slurm_job(cluster, phase)) and (host := ch.submit_host(expansion)):
            jobs.setdefault(host, {})[job] = slurmjob.jobs(cluster, cluster.tier(phase.tier), "squeue", "-o", "%k")
    hosts = [n.name for n in cluster.nodes if n.name in paths or n.name in jobs]
    out = on_each(cluster, hosts, lambda h: ch.facts_command(list(paths.get(h, {})), cluster.engine.install_dir,
                                                          jobs.get(h, {})))
    return {h: ch.facts_from_output(text) for h, text in out.items()}


def recorded_facts(cluster: Cluster) -> dict[str, ch.NodeFacts]:
    """What the last deploys from this checkout put on the nodes (apply --dry contacts nothing)."""
    base = state_dir(cluster)
    facts = {}
    for node in cluster.nodes:
        root = base / "deployed" / node.name
        files = {"/" + p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in root.rglob("*") if p.is_file()} if root.is_dir() else {}
        engine = base / "engine" / node.name
        facts[node.name] = ch.NodeFacts(files, engine.read_text().strip() if engine.is_file() else ch.NOT_THERE)
    return facts
