"""The cluster's plan, not a tier's: which tiers can run at the same time, and whether what is resident at once
fits each device (a GPU, or a node's RAM for CPU devices and mlock)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import kinds
from clusterbook.pure.planner.capacity import GIB, DevicePlan, TierPlan

RAM = "RAM"


@dataclass(frozen=True)
class Share:
    """What one tier keeps resident on one physical device."""

    tier: str
    weights: int
    kv: int
    compute: int
    overhead: int
    what: str = ""  # e.g. "RPC worker", "head", "mlock of the model file"
    pool: int = 0  # CUDA's pool through a full prompt

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.pool + self.overhead


@dataclass(frozen=True)
class Slot:
    """A physical device: GPU k of a node, or a node's RAM."""

    node: str
    device: str  # "GPU0", "GPU1", … or "RAM"
    model: str | None  # GPU model, None for RAM
    capacity: int  # usable bytes (after headroom)

    @property
    def label(self) -> str:
        return f"{self.node} {self.device}" + (f" ({self.model})" if self.model else "")


@dataclass(frozen=True)
class Exclusion:
    """Two tiers that cannot run at the same time, and why."""

    first: str
    second: str
    reason: str


@dataclass(frozen=True)
class SlotLoad:
    """A device and the shares of the tiers resident on it in the worst group that runs at once."""

    slot: Slot
    shares: tuple[Share, ...]

    @property
    def total(self) -> int:
        return sum(s.total for s in self.shares)

    @property
    def headroom(self) -> int:
        return self.slot.capacity - self.total

    @property
    def fits(self) -> bool:
        return self.total <= self.slot.capacity

    @property
    def tiers(self) -> list[str]:
        return sorted({s.tier for s in self.shares})


@dataclass(frozen=True)
class ClusterPlan:
    """Groups of tiers that run at the same time, what excludes the others, and every device's worst load (and
    its load under each group that uses it, for the pictures)."""

    groups: list[tuple[str, ...]]
    exclusions: list[Exclusion]
    loads: list[SlotLoad]
    alternatives: dict[tuple[str, str], list[SlotLoad]]

    def load(self, node: str, device: str) -> SlotLoad | None:
        return next((x for x in self.loads if x.slot.node == node and x.slot.device == device), None)


def _slots(c: Cluster) -> dict[tuple[str, str], Slot]:
    keep = 1 - c.planner.headroom_pct / 100
    slots = {}
    for node in c.nodes:
        for k, gpu in enumerate(node.gpu_devices):
            slots[(node.name, f"GPU{k}")] = Slot(node.name, f"GPU{k}", gpu.model, int(gpu.memory_mib * 2**20 * keep))
        slots[(node.name, RAM)] = Slot(node.name, RAM, None, int(node.ram_gb * 1e9 * keep))
    return slots


def _physical(plan: TierPlan) -> list[tuple[str, str, DevicePlan]]:
    """(node, GPUk or RAM, device plan) for every device of a tier's plan: a node's GPU devices appear in the
    plan in the node's GPU order (llama.cpp's device order), CPU devices live in the node's RAM."""
    seen: dict[str, int] = {}
    out = []
    for planned in plan.devices:
        if planned.gpu is None:
            out.append((planned.node, RAM, planned))
            continue
        k = seen.get(planned.node, 0)
        seen[planned.node] = k + 1
        out.append((planned.node, f"GPU{k}", planned))
    return out


def tier_shares(c: Cluster, tier: Tier, plan: TierPlan) -> dict[tuple[str, str], list[Share]]:
    """Every device a tier occupies and what it keeps there; mlock adds the whole model file to the head's RAM."""
    shares: dict[tuple[str, str], list[Share]] = {}
    head = tier.nodes[0]
    for node, device, d in _physical(plan):
        what = kinds.of(tier).role(tier, node, head)
        if d.total:
            shares.setdefault((node, device), []).append(Share(tier.name, d.weights, d.kv, d.compute, d.overhead,
                                                               what, d.pool))
    if tier.mlock:
        size = sum(c.model(m).bytes for m in tier.served_models)
        shares.setdefault((head, RAM), []).append(Share(tier.name, size, 0, 0, 0, "mlock of the model file"))
    return shares


def _gres_gpus(tier: Tier) -> int:
    """GPUs a SLURM tier's job asks for per node (--gres=gpu:N)."""
    m = re.match(r"^gpu(?::[^:]+)?:(\d+)$", (tier.slurm.gres or "") if tier.slurm else "")
    return int(m.group(1)) if m else 0


def parse_mem(text: str) -> int:
    """A SLURM memory request (`64G`, `512M`) in bytes."""
    return int(text[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[text[-1]]


def _mem_bytes(tier: Tier) -> int:
    return parse_mem(tier.slurm.mem if tier.slurm else "0M")


def exclusion(c: Cluster, a: Tier, b: Tier) -> str | None:
    """Why SLURM cannot run two SLURM tiers at once (their requests on a shared node exceed it), or None.
    A router tier that SLURM may place on several nodes conflicts only when every placement does."""
    if a.manager != "slurm" or b.manager != "slurm":
        return None

    def placements(t):
        return [[n] for n in candidate_nodes(c, t)] if t.floats else [t.nodes]

    reasons = []
    for nodes_a in placements(a):
        for nodes_b in placements(b):
            why = None
            for n in sorted(set(nodes_a) & set(nodes_b), key=lambda n: [x.name for x in c.nodes].index(n)):
                node = c.node(n)
                gpus = len(node.gpu_devices)
                if _gres_gpus(a) + _gres_gpus(b) > gpus:
                    only = "its only GPU" if gpus == 1 else f"its {gpus} GPUs"
                    why = (f"both need {n}'s GPU ({only}; --gres=gpu:{_gres_gpus(a)} and gpu:{_gres_gpus(b)}): "
                           "one waits in the queue")
                elif _mem_bytes(a) + _mem_bytes(b) > node.ram_gb * 1e9:
                    why = (f"their --mem ({a.slurm.mem} + {b.slurm.mem}) exceeds {n}'s {node.ram_gb:g} GB of RAM: "
                           "one waits in the queue")
                if why:
                    break
            if why is None:
                return None  # a placement where both run
            reasons.append(why)
    return reasons[0] if reasons else None


def groups(names: list[str], excluded: set[frozenset[str]]) -> list[tuple[str, ...]]:
    """The largest sets of tiers in which no two exclude each other (every tier is in at least one): the maximal
    cliques of the "may run together" graph (Bron-Kerbosch with a pivot; one clique when nothing excludes, so 30
    tiers take microseconds where walking every subset took 2^30 steps). Largest first, then in file order."""
    index = {n: i for i, n in enumerate(names)}
    together = {n: {m for m in names if m != n and frozenset((n, m)) not in excluded} for n in names}
    found: list[tuple[str, ...]] = []

    def extend(clique: set[str], candidates: set[str], done: set[str]) -> None:
        if not candidates and not done:
            found.append(tuple(sorted(clique, key=index.__getitem__)))
            return
        pivot = max(candidates | done, key=lambda n: len(together[n] & candidates))
        for n in sorted(candidates - together[pivot], key=index.__getitem__):
            extend(clique | {n}, candidates & together[n], done & together[n])
            candidates = candidates - {n}
            done = done | {n}

    extend(set(), set(names), set())
    return sorted(found, key=lambda g: (-len(g), [index[n] for n in g]))


def plan_residency(c: Cluster, plans: dict[str, TierPlan]) -> ClusterPlan:
    """The cluster plan: for every device, the largest load of any group of tiers that runs at once."""
    exclusions = [Exclusion(a.name, b.name, why) for a, b in combinations(c.tiers, 2)
                  if (why := exclusion(c, a, b))]
    names = [t.name for t in c.tiers]
    together = groups(names, {frozenset((e.first, e.second)) for e in exclusions})
    per_tier = {t.name: tier_shares(c, t, plans[t.name]) for t in c.tiers}
    slots = _slots(c)
    used = {key for shares in per_tier.values() for key in shares}
    loads, alternatives = [], {}
    for key, slot in slots.items():
        if key not in used:
            continue
        by_members: dict[tuple[str, ...], tuple[Share, ...]] = {}  # the groups' tiers on this device, once each
        for group in together:
            members = tuple(t for t in group if key in per_tier[t])
            if members and members not in by_members:
                by_members[members] = tuple(s for t in members for s in per_tier[t][key])
        options = list(by_members.values())
        if options:
            loads.append(SlotLoad(slot, max(options, key=lambda o: sum(s.total for s in o))))
            alternatives[key] = [SlotLoad(slot, o) for o in options]
    return ClusterPlan(together, exclusions, loads, alternatives)


def residency_findings(c: Cluster, cplan: ClusterPlan) -> list[tuple[tuple, str]]:
    """Devices where tiers that run at the same time do not fit together (a tier alone is checked by its plan)."""
    out = []
    for load in cplan.loads:
        if load.fits or len(load.tiers) < 2 or load.slot.device == RAM:
            continue
        parts = " + ".join(f"{s.tier} {s.what} {s.total / GIB:.2f} GiB" for s in load.shares)
        tier = next(i for i, t in enumerate(c.tiers) if t.name == load.tiers[-1])
        out.append((("tiers", tier), f"{', '.join(load.tiers)} run at the same time but do not fit together on "
                                     f"{load.slot.label}: {parts} = {load.total / GIB:.2f} GiB of "
                                     f"{load.slot.capacity / GIB:.2f} GiB usable"))
    return out


def ram_findings(c: Cluster, cplan: ClusterPlan) -> list[tuple[tuple, str]]:
    """A node's RAM against what its CPU devices and mlock keep resident."""
    out = []
    for load in cplan.loads:
        if load.slot.device != RAM or load.fits:
            continue
        parts = " + ".join(f"{s.tier} {s.what} {s.total / 1e9:.1f} GB" for s in load.shares)
        node = next(i for i, n in enumerate(c.nodes) if n.name == load.slot.node)
        out.append((("nodes", node, "ram_gb"), f"{load.slot.node}'s RAM does not hold what stays resident: {parts} = "
                                               f"{load.total / 1e9:.1f} GB of {load.slot.capacity / 1e9:.1f} GB "
                                               "usable"))
    return out


def exclusion_text(cplan: ClusterPlan) -> list[str]:
    """Plain sentences for the plan and the docs."""
    return [f"{e.first} and {e.second} cannot run at the same time: {e.reason}." for e in cplan.exclusions]


def residency_json(cplan: ClusterPlan) -> dict:
    """The cluster plan as plain data."""
    return {"groups": [list(g) for g in cplan.groups],
            "exclusions": [{"tiers": [e.first, e.second], "reason": e.reason} for e in cplan.exclusions],
            "devices": [{"node": x.slot.node, "device": x.slot.device, "gpu": x.slot.model,
                         "capacity": x.slot.capacity, "total": x.total, "headroom": x.headroom, "fits": x.fits,
                         "shares": [{"tier": s.tier, "what": s.what, "weights": s.weights, "kv": s.kv,
                                     "compute": s.compute, "pool": s.pool, "overhead": s.overhead,
                                     "total": s.total}
                                    for s in x.shares]} for x in cplan.loads]}
