"""An RPC tier's model at the other quantizations the cluster file lists (the same architecture and parameter
count): each planned on the tier's own devices, split and context, so the choice of file is a table, not a guess."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import Cluster, RpcTier
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import TierPlan


@dataclass(frozen=True)
class Variant:
    """One file of the tier's model, planned as if the tier served it."""

    model: str
    quantization: str
    size_gb: float | None
    plan: TierPlan
    served: bool  # the file the tier serves now

    @property
    def peak_use(self) -> float:
        """The fullest device's share of its usable memory."""
        return max(d.total / d.capacity for d in self.plan.devices if d.capacity)


def variants(c: Cluster, tier: RpcTier) -> list[Variant]:
    """The tier's model and its siblings (same architecture and params_b), smallest first."""
    own = c.model(tier.model)
    siblings = [m for m in c.models if m.architecture == own.architecture and m.params_b == own.params_b]
    out = []
    for m in siblings:
        swapped = c.model_copy(update={"tiers": [t.model_copy(update={"model": m.id}) if t.name == tier.name else t
                                                 for t in c.tiers]})
        size = m.size_bytes / 1e9 if m.size_bytes else m.approx_size_gb
        out.append(Variant(m.id, m.quantization, size, plan_tier(swapped, swapped.tier(tier.name)), m.id == own.id))
    return sorted(out, key=lambda v: (v.size_gb or 0, v.model))
