"""What the node programs are told: the keeper's and the wake service's JSON configuration (per SLURM tier its job,
script, marks and idle time; per tier behind the gateway its hold, Retry-After and where it serves). Pure."""

from __future__ import annotations

import json
import posixpath

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster
from clusterbook.pure import layout, slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.loadtime import hold_s, new_job_hold_s, predict_load, wait_cap_s, whole_s


def keeper_config(c: Cluster) -> str:
    """The keeper's configuration: per SLURM tier its job, script, marks and, on demand, its idle time."""
    jobs = [{"job": topo.units(t).job, "tier": t.name, "script": layout.sbatch_path(c, t), "user": c.access.user,
             "nodes": candidate_nodes(c, t),
             "idle_s": t.on_demand.idle_s if t.on_demand else None,
             "gpus": sum(1 for d in plan_tier(c, t).devices if d.gpu),
             "marks": {m: slurmjob.marker(c, t, m) for m in slurmjob.MARKS}} for t in c.slurm_tiers]
    return json.dumps({"log_dir": c.storage.log_dir, "wake_port": c.gateway.wake_port if c.gateway else None,
                       "textfile_dir": layout.TEXTFILE_DIR, "digest_chars": slurmjob.DIGEST_CHARS, "jobs": jobs},
                      indent=2) + "\n"


def wake_config(c: Cluster) -> str:
    """The wake service's configuration: per tier on demand its job, endpoint record, cap and how to read its
    requests in flight."""
    tiers = {}
    for tier in (t for t in c.tiers if t.on_demand):
        plan = plan_tier(c, tier)
        tiers[tier.name] = {"job": topo.units(tier).job, "kind": tier.kind, "user": c.access.user,
                            "record": posixpath.join(c.storage.endpoint_dir, f"{tier.name}.json"),
                            "cap_s": wait_cap_s(c, tier, plan),
                            "key_file": tier.api_key.file if tier.api_key and tier.api_key.file else None,
                            "hosts": topo.tier_hosts(c, tier),
                            "marks": {m: slurmjob.marker(c, tier, m) for m in slurmjob.MARKS}}
    return json.dumps({"port": c.gateway.wake_port, "tiers": tiers, "routes": hold_routes(c),
                       "body_max": c.gateway.body_max_mib << 20, "in_flight_max": c.gateway.hold_in_flight_max,
                       "max_lost": HOLD_MAX_LOST},
                      indent=2) + "\n"


HOLD_MAX_LOST = 3  # a request the tier failed this often while answering it is not sent again (node/hold.py); two
# can be innocent: the systemd lab's scenario kills a worker, then the head, under a long request (CI soak: 2 of 12)
ALERT_JOURNAL_MEMORY_MIB = 64  # the alert journal keeps at most 500 alerts of bounded labels (alert_journal.py)
HOLD_BASE_MIB = 128  # the wake service's own memory (Python, its threads), measured under 40 MiB on the lab


def hold_memory_max_mib(c: Cluster) -> int:
    """The wake service's MemoryMax: its own memory and, for each request it may hold, one body and one parse of the
    largest body it parses (one at a time: hold.py PARSE_MAX, 2 MiB, up to 30 times that)."""
    return HOLD_BASE_MIB + c.gateway.hold_in_flight_max * c.gateway.body_max_mib + 64


def hold_routes(c: Cluster) -> dict:
    """Every tier behind the gateway as the hold sees it: where it serves (its address, or a SLURM job's record),
    its hold, the Retry-After past it, its timeout, the route's path prefix and the mark of a change in progress."""
    routes = {}
    for route in c.gateway.routes:
        tier = c.tier(route.tier)
        slurm, plan = tier.manager == "slurm", plan_tier(c, tier)
        routes[tier.name] = {
            "backend": None if slurm else f"{topo.http_address(c, tier)}:{tier.port}",
            "record": posixpath.join(c.storage.endpoint_dir, f"{tier.name}.json") if slurm else None,
            "hold_s": hold_s(c, tier, plan), "retry_after": whole_s(predict_load(c, tier, plan).recovery_s),
            "timeout_s": tier.timeout_s, "prefix": route.path, "changing": layout.changing_mark(tier),
            "continue": route.continue_streams, "hosts": topo.tier_hosts(c, tier) if slurm else None}
        if slurm:  # while its job is away (the record gone, the tier still wanted), the new job is waited for
            load = predict_load(c, tier, plan)
            routes[tier.name].update(new_job_hold_s=new_job_hold_s(c, tier, plan),
                                     new_job_retry_after=whole_s(load.new_job_recovery_s))
            if c.keeper_node == c.gateway.node:  # the keeper's marks are here: a stopped tier is not waited for,
                # one whose job waits for other jobs' nodes is answered with SLURM's estimate at once
                routes[tier.name].update(wanted=slurmjob.marker(c, tier, "wanted"),
                                         released=slurmjob.marker(c, tier, "released"),
                                         waiting=slurmjob.marker(c, tier, "waiting"))
    return routes
