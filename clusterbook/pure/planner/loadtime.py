"""How long a tier takes to load its model, and so to come back after a worker crash: the head's own share read
from page cache onto its devices, and every worker's share sent through llama.cpp's RPC, one after another."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure.planner.capacity import TierPlan

# SLURM never starts a batch job when it is submitted (slurm-wlm 22.05: job_allocate only tests it): slurmctld's
# background loop, once a second, runs a scheduling pass for new submissions, but not within batch_sched_delay of
# its last pass (Cluster.slurm_batch_sched_delay_s: 3 s unless the administrators set it). A job's end and the full
# pass every sched_interval (60 s) are such passes. The lab, slurmctld at debug2: a submission waited 0.05-1.0 s for
# the loop, and 1.5 s when it came 1.5 s after the periodic pass. slurm_submit_start_s holds the usual wait; the
# delay is the most a pass just before adds to it.


def whole_s(seconds: float) -> int:
    """A predicted duration as every page, message and header shows it: whole seconds, rounded up (a client told
    to retry after it is never early), at least 1."""
    return max(1, math.ceil(seconds))


@dataclass(frozen=True)
class LoadTime:
    """The predicted load of a tier, in parts (seconds)."""

    tier: str
    local_bytes: int  # the head's devices (and its CPU)
    rpc_bytes: int  # every worker's share
    local_s: float
    rpc_s: float
    restart_s: float  # before the head loads again: systemd's RestartSec (head and workers restart side by side),
    # the job script's restart of its steps, or SLURM's hold on a requeued job
    restart_kind: str  # "restart" (systemd), "step restart in the job", or with step_restarts 0 new_job_kind
    rpc_rate_gbs: float  # the rate that applies: the measured one, or the network's if it is slower
    new_job_s: float | None = None  # a SLURM tier whose job ended (a preemption, or no step restarts left): until
    # it runs again, apart from the load: SLURM's requeue hold and start, or the keeper's submission and its start
    new_job_kind: str | None = None  # "SLURM requeue" or "keeper resubmission"
    head_restart_s: float | None = None  # before the head loads again after its own crash (None: restart_s)
    hash_s: float = 0.0  # workers that keep their share (kept_weights): the head hashes it instead of sending it
    resent_s: float = 0.0  # ... and sends again only a crashed worker's: the largest share's time over RPC
    locked_s: float = 0.0  # a tier with mlock: the head maps and locks its whole model file before it loads
    others_hash_s: float = 0.0  # after a worker's crash, the head hashes the other workers' shares (all but one)
    rehash_s: float = 0.0  # a worker that keeps a share a head sent without hashes (a cold load) reads it back and
    # hashes it when the head goes, before it answers the next: its largest share at weights_rehash_gbs (0 where an
    # engine patch speeds up hash_on_arrival: it hashed each weight as it arrived)
    others_rehash_s: float = 0.0  # the same for the workers left after one crashed (the second largest share)

    @property
    def load_s(self) -> float:
        """A whole load (a cold start): the head's share, and the workers' sent (a head hashes only for a worker
        that keeps weights already: none does on a cold start)."""
        return self.locked_s + self.local_s + self.rpc_s

    @property
    def kept(self) -> bool:
        return self.hash_s > 0

    @property
    def recovery_s(self) -> float:
        """After a worker crash: the head aborts and is started again (systemd, or the SLURM job's own script;
        a job with no step restarts is requeued), and loads everything once more; where workers keep weights, the
        others keep their share (hashed by them while the head restarts, then by the head, not sent) and only the
        crashed worker's is sent again."""
        if not self.kept:
            return self.restart_s + self.locked_s + self.local_s + self.rpc_s
        return max(self.restart_s, self.others_rehash_s) + self.locked_s + self.local_s + self.others_hash_s + \
            self.resent_s

    @property
    def head_recovery_s(self) -> float:
        """After the head's own crash (its workers still running): started again, it loads its own share; the
        workers' is hashed where they keep it (each worker first hashes what it holds unhashed, while the head
        restarts: the head's first request waits for that), else sent again."""
        restart = self.restart_s if self.head_restart_s is None else self.head_restart_s
        if not self.kept:
            return restart + self.locked_s + self.local_s + self.rpc_s
        return max(restart, self.rehash_s) + self.locked_s + self.local_s + self.hash_s

    @property
    def new_job_recovery_s(self) -> float | None:
        """A SLURM tier after its job ended (a preemption, once the GPUs are free): requeue or resubmission, start
        and load."""
        return None if self.new_job_s is None else self.new_job_s + self.load_s


def predict_load(c: Cluster, tier: Tier, plan: TierPlan) -> LoadTime:
    """The plan's bytes per device over the planner's measured rates; RPC capped by the RPC network's bandwidth."""
    p = c.planner
    head = tier.nodes[0]
    local = sum(d.weights for d in plan.devices if d.node == head)
    remote = sum(d.weights for d in plan.devices if d.node != head)
    fast = c.engine.patched_for("rpc_load")
    rate = p.rpc_fast_load_gbs if fast else p.rpc_load_gbs
    if tier.workers:
        rate = min(rate, c.networks[c.rpc_network].bandwidth_gbps / 8)
    new_job, new_kind = None, None
    if tier.manager == "slurm":
        new_job, new_kind = ((c.slurm_requeue_hold_s + p.slurm_start_s, "SLURM requeue") if tier.slurm.requeue else
                             (tier.slurm.keeper_interval_s + c.slurm_batch_sched_delay_s + p.slurm_submit_start_s,
                              "keeper resubmission"))
        restart, kind = ((p.slurm_step_restart_s, "step restart in the job") if tier.slurm.step_restarts else
                         (new_job, new_kind))
    else:
        restart, kind = max([tier.systemd.restart_sec] + ([tier.worker_systemd.restart_sec]
                                                          if tier.workers else [])), "restart"
    rpc_s = remote / (rate * 1e9)
    head_restart = (p.slurm_step_restart_s if tier.slurm.step_restarts else new_job) if tier.manager == "slurm" \
        else tier.systemd.restart_sec
    # the workers that did not crash keep their share only where they outlive the head: systemd, or a SLURM job that
    # restarts its ended steps (a job that ends takes every worker with it)
    survive = tier.manager != "slurm" or bool(tier.slurm.step_restarts)
    kept = c.kept_weights_s(tier) > 0 and remote > 0 and survive
    shares = sorted((sum(d.weights for d in plan.devices if d.node == w) for w in tier.nodes[1:]), reverse=True)
    largest, second = (shares + [0, 0])[:2]
    locked = sum(c.model(m).bytes for m in tier.served_models) / (p.mlock_gbs * 1e9) if \
        tier.mlock else 0.0  # the whole file, before any tensor loads
    hashed, reread = p.weights_hash_gbs * 1e9, p.weights_rehash_gbs * 1e9
    if c.engine.patched_for("hash_on_arrival"):
        reread = float("inf")  # the workers hashed each weight as it arrived: nothing to read back
    return LoadTime(tier.name, local, remote, local / (p.local_load_gbs * 1e9), rpc_s,
                    float(restart), kind, rate, new_job, new_kind, float(head_restart),
                    remote / hashed if kept else 0.0, largest / (rate * 1e9) if kept else 0.0, locked,
                    (remote - largest) / hashed if kept else 0.0, largest / reread if kept else 0.0,
                    second / reread if kept else 0.0)


def cold_start_s(c: Cluster, tier: Tier, plan: TierPlan) -> float:
    """A released on-demand tier, from its first request until it answers: the gateway's wake service starts the
    keeper at once, so SLURM's submission and start, then the load."""
    return c.planner.slurm_submit_start_s + predict_load(c, tier, plan).load_s


def cold_start_at_most_s(c: Cluster, tier: Tier, plan: TierPlan) -> float:
    """The cold start when SLURM ran a scheduling pass just before the first request (the released job's own end,
    another job's, or its periodic full pass): the job waits batch_sched_delay more before SLURM starts it."""
    return cold_start_s(c, tier, plan) + c.slurm_batch_sched_delay_s


def wait_cap_s(c: Cluster, tier: Tier, plan: TierPlan) -> int:
    """How long the gateway holds a request for a released tier: the file's cap, else the predicted cold start with
    half again and 10 s of margin."""
    if tier.on_demand and tier.on_demand.wait_cap_s:
        return tier.on_demand.wait_cap_s
    return default_wait_cap_s(c, tier, plan)


def hold_s(c: Cluster, tier: Tier, plan: TierPlan) -> int:
    """How long the gateway holds a request its tier cannot answer now: the predicted recovery and the file's
    margin (gateway.hold_margin_s)."""
    return whole_s(predict_load(c, tier, plan).recovery_s) + (c.gateway.hold_margin_s if c.gateway else 0)


def new_job_hold_s(c: Cluster, tier: Tier, plan: TierPlan) -> int | None:
    """How long the gateway holds a request while a SLURM tier's job is away (preempted and requeued, or ended and
    submitted again by the keeper): until the new job is predicted to serve, and the file's margin. None: a tier
    whose job never moves (systemd)."""
    load = predict_load(c, tier, plan)
    if load.new_job_recovery_s is None:
        return None
    return whole_s(load.new_job_recovery_s) + (c.gateway.hold_margin_s if c.gateway else 0)


BUSY_RETRY_AFTER_S = 1  # the Retry-After of a request beyond what a tier admits: a slot frees within seconds


def admitted(c: Cluster, tier: Tier) -> int:
    """Requests the gateway lets reach a tier at once: its slots (per resident model, router mode) and the queue
    the file allows per slot (gateway.queue_per_slot); the next one gets 429."""
    slots = tier.parallel * max(tier.models_max, 1)
    return slots * (1 + (c.gateway.queue_per_slot if c.gateway else 0))


def default_wait_cap_s(c: Cluster, tier: Tier, plan: TierPlan) -> int:
    return math.ceil(1.5 * cold_start_s(c, tier, plan) + 10)


def recovery_text(c: Cluster, tier: Tier, plan: TierPlan) -> str:
    """One sentence: the predicted load and recovery after a worker crash, beside the tier's recovery target."""
    load = predict_load(c, tier, plan)
    targets = c.targets_for(tier.name)
    target = f" (target {targets.recovery_s.target:g} s)" if targets and targets.recovery_s else ""
    return (f"Predicted load {load.load_s:.0f} s ({load.local_bytes / 1e9:.1f} GB from page cache, "
            f"{load.rpc_bytes / 1e9:.1f} GB through RPC at {load.rpc_rate_gbs:g} GB/s); back after a worker crash in "
            f"about {whole_s(load.recovery_s)} s{target}, {load.restart_kind} {load.restart_s:g} s included.")


def load_json(c: Cluster, tier: Tier, plan: TierPlan) -> dict:
    load = predict_load(c, tier, plan)
    return {"local_bytes": load.local_bytes, "rpc_bytes": load.rpc_bytes, "local_s": round(load.local_s, 2),
            "rpc_s": round(load.rpc_s, 2), "load_s": round(load.load_s, 2), "restart_s": load.restart_s,
            "restart": load.restart_kind, "recovery_s": round(load.recovery_s, 1), "rpc_rate_gbs": load.rpc_rate_gbs,
            "head_recovery_s": round(load.head_recovery_s, 1),
            **({"new_job": load.new_job_kind, "new_job_recovery_s": round(load.new_job_recovery_s, 1)}
               if load.new_job_s is not None else {})}
