"""Cross-field rules of the SLURM sections: the site's partitions and QoS, the job's CPUs, the slurm.conf written."""

from __future__ import annotations

from clusterbook.model.problems import Path
from clusterbook.model.schema import Cluster

Finding = tuple[Path, str]


def slurm_findings(c: Cluster) -> list[Finding]:
    """The SLURM sections against the rest: a controller, logs every node writes where the controller reads them, the
    site's partitions and QoS (a tier runs where the site gives it, under a QoS that preempts nothing), CPUs the
    nodes have, and the slurm.conf clusterbook writes."""
    out: list[Finding] = []
    nodes = {n.name for n in c.nodes}
    uses_slurm = [i for i, t in enumerate(c.tiers) if t.manager == "slurm"]
    if uses_slurm and c.slurm_controller is None:
        out.append((("tiers", uses_slurm[0], "manager"),
                    "a SLURM tier needs a node with role controller (where sbatch runs) or a slurm section"))
    instead = {"site_requeue_hold_s": "set slurm.requeue_hold_s instead, or remove it",
               "site_batch_sched_delay_s": "its slurm.conf keeps SLURM's default; remove it"}
    shared = c.storage.shared_dir.rstrip("/") + "/" if c.storage.shared_dir else None
    if uses_slurm and not (shared and c.storage.log_dir.startswith(shared)):
        out.append((("storage", "log_dir"),
                    "SLURM jobs write their logs on the nodes they run on, and the keeper, invoke logs and the "
                    "troubleshooting commands read them on the controller: put log_dir under storage.shared_dir "
                    + (f"({c.storage.shared_dir})" if shared else "(give one: a folder every node mounts)")))
    if c.slurm_site:  # the site's SLURM: a tier runs in a partition it lists, under a QoS that preempts nothing
        preempting = {q.name: q for q in c.slurm_site.qos if q.preempts}
        qos_names = {q.name for q in c.slurm_site.qos}
        for j, name in enumerate(c.slurm_site.tier_partitions):
            if name not in c.slurm_site.partitions:
                out.append((("slurm_site", "tier_partitions", j), f"'{name}' is not one of the site's partitions "
                            f"({', '.join(c.slurm_site.partitions) or 'none listed'})"))
        for i, tier in enumerate(c.tiers):
            if not tier.slurm:
                continue
            if c.slurm_site.partitions and tier.slurm.partition not in c.slurm_site.partitions:
                out.append((("tiers", i, "slurm", "partition"), f"'{tier.slurm.partition}' is not one of the "
                            f"site's partitions ({', '.join(c.slurm_site.partitions)})"))
            elif c.slurm_site.partitions and tier.slurm.partition not in c.slurm_site.tier_partitions:
                what = c.slurm_site.partitions[tier.slurm.partition]
                given = ", ".join(c.slurm_site.tier_partitions) or "none: list them in slurm_site.tier_partitions"
                out.append((("tiers", i, "slurm", "partition"), f"'{tier.slurm.partition}' runs {what}; the site "
                            f"gives the tiers {given}"))
            if tier.slurm.qos in preempting:
                q = preempting[tier.slurm.qos]
                out.append((("tiers", i, "slurm", "qos"), f"'{q.name}' is the QoS of {q.used_by}: it preempts "
                            f"{', '.join(q.preempts)}; a tier takes the QoS the site gives it, which yields"))
            elif qos_names and tier.slurm.qos and tier.slurm.qos not in qos_names:
                out.append((("tiers", i, "slurm", "qos"), f"'{tier.slurm.qos}' is not one of the site's QoS "
                            f"({', '.join(sorted(qos_names))})"))
    by_name = {n.name: n for n in c.nodes}
    for i, tier in enumerate(c.tiers):
        if tier.manager != "slurm":
            continue
        if tier.threads and tier.threads > tier.slurm_cpus:
            out.append((("tiers", i, "slurm", "cpus"), f"the job asks {tier.slurm_cpus} CPU(s) per node and the "
                        f"server runs {tier.threads} threads: ask for as many CPUs as threads, or fewer threads"))
        small = [n for n in tier.nodes if n in by_name and by_name[n].cpu_cores < tier.slurm_cpus]
        if small:
            out.append((("tiers", i, "slurm", "cpus") if tier.slurm.cpus else ("tiers", i, "threads"),
                        f"the job asks {tier.slurm_cpus} CPUs per node, and {small[0]} has "
                        f"{by_name[small[0]].cpu_cores}: SLURM would never start it"))
    for name, what in instead.items():  # clusterbook writes this slurm.conf: a declaration would be ignored
        if c.slurm and getattr(c.planner, name) is not None:
            out.append((("planner", name), f"declares the site's slurm.conf, but clusterbook configures SLURM here "
                        f"(the slurm section): {what}"))
    if not c.slurm:
        return out
    if c.slurm.controller not in nodes:
        out.append((("slurm", "controller"), f"unknown node '{c.slurm.controller}'"))
    partitions = {p.name for p in c.slurm.partitions}
    for i, part in enumerate(c.slurm.partitions):
        for j, node in enumerate(part.nodes):
            if node not in nodes:
                out.append((("slurm", "partitions", i, "nodes", j), f"unknown node '{node}'"))
    for i, tier in enumerate(c.tiers):
        if tier.slurm and tier.slurm.partition not in partitions:
            out.append((("tiers", i, "slurm", "partition"),
                        f"unknown partition '{tier.slurm.partition}' (partitions: {', '.join(sorted(partitions))})"))
    return out
