"""What a SLURM tier's job asks of each node it runs on, with the basis of each figure (issue 64): memory as the plan
charges the job's cgroup, never at or below a measured failure; CPUs as measured; and the cores left to other jobs
(VASP's, on beefcake2). The one source of these figures for the checks, plan --solve and the Tiers page."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure.planner.capacity import GIB, TierPlan
from clusterbook.pure.planner.residency import parse_mem


def slurm_need(plan: TierPlan) -> int:
    """Host memory a job needs per node in the worst case: the model file in page cache plus buffers."""
    return sum(d.weights for d in plan.devices) + sum(d.kv + d.compute for d in plan.devices)


def mem_text(size: float) -> str:
    """A --mem value at or above size: whole GiB, or whole MiB below 1 GiB."""
    return f"{math.ceil(size / GIB)}G" if size >= GIB else f"{math.ceil(size / 2**20)}M"


@dataclass(frozen=True)
class JobAsk:
    """One SLURM tier's asks per node: --mem and --cpus-per-task, each with what it rests on."""

    tier: str
    mem: int  # bytes the file asks (--mem)
    planned: int  # bytes the plan charges the job's cgroup (the model file in page cache, KV, buffers), with margin
    failed: int | None  # bytes a job was measured to be killed at (slurm.mem_failed): the ask must be above
    cpus: int  # --cpus-per-task (the file's slurm.cpus, else its threads)
    cores_left: dict[str, int]  # per node the job may run on: the cores it leaves to other jobs

    @property
    def mem_ok(self) -> bool:
        return self.mem >= self.planned and (self.failed is None or self.mem > self.failed)

    def mem_basis(self) -> str:
        """Why the --mem is what it is, in words."""
        said = f"the plan charges the job {mem_text(self.planned)} (the model file in page cache, KV cache, buffers)"
        if self.failed is not None:
            said += (f"; {mem_text(self.failed)} was measured to fail (the job killed at its limit), so the ask stays "
                     "above it")
        return said

    def cpus_basis(self, tier: Tier) -> str:
        if tier.slurm and tier.slurm.cpus:
            return "the file's slurm.cpus"
        return f"one per server thread (threads: {tier.threads})" if tier.threads else "one: the file names none"


def job_ask(c: Cluster, tier: Tier, plan: TierPlan) -> JobAsk:
    """The asks of a SLURM tier's job (a tier without a slurm section asks nothing: mem 0)."""
    planned = int(max(GIB, slurm_need(plan) * (1 + c.planner.slurm_mem_margin_pct / 100)))
    slurm = tier.slurm
    cores = {n.name: n.cpu_cores for n in c.nodes}
    nodes = candidate_nodes(c, tier) if slurm else []
    return JobAsk(tier.name, parse_mem(slurm.mem) if slurm else 0, planned,
                  parse_mem(slurm.mem_failed) if slurm and slurm.mem_failed else None, tier.slurm_cpus,
                  {n: max(0, cores[n] - tier.slurm_cpus) for n in nodes if n in cores})


def proposed_mem(c: Cluster, tier: Tier, plan: TierPlan) -> int:
    """The --mem plan --solve proposes: the plan's charge; where that is at or below a measured failure, the file's
    own ask, the one measured to work (the plan has been wrong there once, so it is not trusted below it)."""
    ask = job_ask(c, tier, plan)
    if ask.failed is not None and ask.planned <= ask.failed:
        return max(ask.mem, ask.failed + GIB)
    return ask.planned
