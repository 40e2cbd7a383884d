"""What the plan says a tier's GPUs and fabric reach, and so the target verify judges them by: the file's, or the
plan's where the file asks more than the plan can give (a layer split of N GPUs keeps each busy about 1/N of a
token; one RPC connection per worker carries the load at the planner's rate, not the link's)."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import Cluster, RpcTier, Tier
from clusterbook.pure.kinds import plan_tier

UTIL_MARGIN = 0.8  # nvidia-smi's utilisation is the share of its sample period with a kernel running: kernel launch
# gaps, sampling and the head's HTTP side cost a GPU up to a fifth of its planned share


@dataclass(frozen=True)
class Judged:
    """The figure verify judges by, what the plan reaches (margin included), and what the file asks."""

    target: float
    reach: float
    asked: float

    @property
    def why(self) -> str:
        if self.asked <= self.reach:
            return f"the file's {self.asked:g} (the plan reaches {self.reach:.3g})"
        return f"the plan's {self.reach:.3g}: the file's {self.asked:g} is more than the plan reaches"


def gpu_busy_pct(c: Cluster, tier: Tier) -> dict[tuple[str, int], float]:
    """(node, GPU index) -> the share of a generated token's time the plan has that GPU computing, in %: its weights
    read at its bandwidth, over the token's whole time (every device in turn, and the RPC hops)."""
    plan = plan_tier(c, tier)
    if not plan.decode_bound_tps:
        return {}
    token_s = 1 / plan.decode_bound_tps
    busy: dict[tuple[str, int], float] = {}
    seen: dict[str, int] = {}
    for d in plan.devices:
        if d.gpu is None or not d.bandwidth_gbs:
            continue
        index = seen.get(d.node, 0)
        seen[d.node] = index + 1
        busy[(d.node, index)] = min(100.0, 100 * d.weights / (d.bandwidth_gbs * 1e9) / token_s)
    return busy


def planned_fabric_gbps(c: Cluster, tier: RpcTier) -> float:
    """What one RPC connection (llama.cpp opens one per worker) carries in the plan: the load's rate, capped by the
    link (loadtime.predict_load counts the same), in Gbit/s."""
    rate = c.planner.rpc_fast_load_gbs if c.engine.patched_for("rpc_load") else c.planner.rpc_load_gbs
    return min(rate * 8, c.networks[c.rpc_network].bandwidth_gbps)


def judged_gpu_util(c: Cluster, tier: Tier, node: str, index: int) -> Judged | None:
    """The utilisation verify asks of one GPU during generation (None: the file asks none, or the plan has no
    figure for that GPU)."""
    targets = c.targets_for(tier.name)
    planned = gpu_busy_pct(c, tier).get((node, index))
    if not (targets and targets.gpu_util_pct) or planned is None:
        return None
    asked, reach = targets.gpu_util_pct.target, planned * UTIL_MARGIN
    return Judged(min(asked, reach), reach, asked)


def judged_fabric(c: Cluster, tier: Tier) -> Judged | None:
    """The bandwidth verify asks of one stream from the head to each worker (None: the file asks none, or the tier
    has no workers)."""
    targets = c.targets_for(tier.name)
    if not (targets and targets.fabric_gbps) or not tier.workers:
        return None
    asked, reach = targets.fabric_gbps.target, planned_fabric_gbps(c, tier)
    return Judged(min(asked, reach), reach, asked)


def busy_summary(c: Cluster, tier: Tier) -> str:
    """One line for the pages: each GPU's planned share of a token."""
    busy = gpu_busy_pct(c, tier)
    return ", ".join(f"{node} GPU{i} {pct:.0f} %" for (node, i), pct in busy.items())

