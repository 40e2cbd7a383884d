"""The tier kinds, one module each (router, rpc, embeddings), and the table through which the rest of clusterbook
asks a tier's kind what differs between kinds: a new kind is a module here and one entry in KINDS."""

from __future__ import annotations

from clusterbook.model.schema import Cluster
from clusterbook.pure import flags as fl
from clusterbook.pure.kinds import embeddings, router, rpc
from clusterbook.pure.kinds.base import TierKind
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.shape import Shape, shape_of

KINDS: dict[str, TierKind] = {k.name: k for k in (router.KIND, rpc.KIND, embeddings.KIND)}


def of(tier) -> TierKind:
    """The kind of a tier."""
    return KINDS[tier.kind]


PLANS_KEPT = 64  # the last plans made: rendering one file asks for each tier's plan about 11 times (16 of 53 ms)
_PLANS: dict[tuple[int, int], tuple[Cluster, object, TierPlan]] = {}


def plan_tier(c: Cluster, tier, shape: Shape | None = None) -> TierPlan:
    """The tier's capacity plan (shape: its model's GGUF header, where read; else the file's declared shape). A plan
    of the file's declared shape is made once per cluster and tier object (both are frozen, and the cache holds
    them, so an id is never another object's); one read from a header is made each time."""
    if shape is not None:
        return of(tier).plan(c, tier, shape)
    key = (id(c), id(tier))
    kept = _PLANS.get(key)
    if kept is not None and kept[0] is c and kept[1] is tier:
        return kept[2]
    made = of(tier).plan(c, tier, None)
    if len(_PLANS) >= PLANS_KEPT:
        del _PLANS[next(iter(_PLANS))]  # the oldest
    _PLANS[key] = (c, tier, made)
    return made


def plan_cluster(c: Cluster, models_dir=None) -> dict[str, TierPlan]:
    """Plans of every tier; a kind that reads the GGUF header does so where the model file is in models_dir."""
    return {t.name: plan_tier(c, t, shape_of(c.model(t.model), models_dir) if of(t).one_model else None)
            for t in c.tiers}


def server_flags(c: Cluster, tier) -> list[fl.Flag]:
    """llama-server's flags for a tier, in a stable order."""
    return of(tier).server_flags(c, tier)


def server_argv(c: Cluster, tier) -> list[str]:
    return fl.server_command(c, server_flags(c, tier))
