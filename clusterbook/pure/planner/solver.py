"""The placement solver: every placement the cluster allows for its tiers (an RPC tier's head and workers and their
split, a router tier's node, a smaller context down to a floor, server slots that each keep the floor, KV cache
types from an allowed set, a SLURM job's --mem and --gres fitted to the plan), judged by the same planner as the
file itself, ranked by what an operator wants first: the groups the file says must co-reside together, every tier
serving at once, then targets met, no node whose preemption takes two tiers down, decode speed, recovery, slots
and headroom."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import combinations, product

import yaml

from clusterbook.model.schema import FLASH_ATTN_MIN_CC, QUANTIZED_CACHE_TYPES, Cluster, RouterTier, RpcTier
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import GIB
from clusterbook.pure.planner.findings import plan_findings
from clusterbook.pure.planner.jobask import job_ask, mem_text, proposed_mem
from clusterbook.pure.planner.loadtime import predict_load
from clusterbook.pure.planner.residency import plan_residency, ram_findings, residency_findings

MAX_PLACEMENTS = 2_000  # combinations judged at most; past that the search keeps each tier's own best few


@dataclass
class Placement:
    """One way to place every tier: what changes per tier, and how it plans."""

    changes: dict[str, dict]  # tier -> {field: value} that differ from the file
    serving_together: bool  # every tier can run at the same time
    feasible: bool  # every tier fits its devices, alone and beside the tiers that run with it
    targets_met: int  # decode and recovery targets met, over all tiers
    decode_tps: dict[str, float]
    recovery_s: dict[str, float]
    headroom_gib: float  # the least headroom of any device that a tier uses
    problems: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)  # why tiers cannot run together, where they cannot
    margin_gib: float = 0.0  # the least memory left on a GPU beyond the planner's measured error (policy: >= 0)
    co_resides: bool = True  # every group of planner.co_reside serves together
    slots: dict[str, int] = field(default_factory=dict)  # server slots per tier (--parallel)
    slot_ctx: dict[str, int] = field(default_factory=dict)  # the context each slot gets (ctx_size / parallel)
    preempted_together: list[str] = field(default_factory=list)  # "node: tier, tier" where one preemption takes
    # several tiers down (their jobs share the node, and another QoS preempts theirs)

    @property
    def rank(self) -> tuple:
        """Smaller is better: feasible, the declared groups together, every tier together, targets met, then decode,
        recovery, slots (each keeps the per-request context floor), headroom, and the fewest changes."""
        return (not self.feasible, not self.co_resides, not self.serving_together, -self.targets_met,
                len(self.preempted_together),
                -round(sum(self.decode_tps.values()), 1), round(sum(self.recovery_s.values())),
                -sum(self.slots.values()), -round(self.headroom_gib, 2), sum(len(f) for f in self.changes.values()))

    def as_json(self) -> dict:
        return {"changes": self.changes, "feasible": self.feasible, "co_resides": self.co_resides,
                "serving_together": self.serving_together, "targets_met": self.targets_met, "slots": self.slots,
                "slot_ctx": self.slot_ctx,
                "decode_bound_tps": {k: round(v, 1) for k, v in self.decode_tps.items()},
                "recovery_s": {k: round(v) for k, v in self.recovery_s.items()},
                "least_gpu_headroom_gib": round(self.headroom_gib, 2),
                "least_gpu_margin_gib": round(self.margin_gib, 2), "preempted_together": self.preempted_together,
                "problems": self.problems, "waits": self.waits}


def better(current: Placement, found: Placement) -> bool:
    """Whether the solver's placement serves more than the file's: the declared groups or every tier together where
    the file's are not, more targets met, or a fit where the file's does not fit."""
    return found.feasible and found.changes != {} and (
        not current.feasible or (found.co_resides and not current.co_resides)
        or (found.serving_together and not current.serving_together) or found.targets_met > current.targets_met)


def share_nodes(c: Cluster) -> dict[str, list[int]]:
    """Nodes that may hold a tier's shares, each with the bytes of each of its devices: compute nodes (or nodes with
    no roles) by their GPUs' memory; on a cluster with no GPU at all (the lab), by their RAM."""
    compute = [n for n in c.nodes if "compute" in n.roles or not n.roles]
    if any(n.gpus for n in c.nodes):
        return {n.name: [g.memory_mib * 2**20 for g in n.gpu_devices] for n in compute if n.gpu_devices}
    return {n.name: [int(n.ram_gb * 1e9)] for n in compute}


MAX_OPTIONS_PER_TIER = 64  # head and worker sets tried per RPC tier (in file order, smallest sets first)


def _fewest_nodes(devices: dict[str, list[int]], needed: int) -> int:
    """The fewest nodes whose devices add up to `needed` (the nodes with the most devices first)."""
    total = 0
    for count, n in enumerate(sorted((len(d) for d in devices.values()), reverse=True), 1):
        total += n
        if total >= needed:
            return count
    return len(devices)


def _rpc_options(c: Cluster, tier: RpcTier) -> list[dict]:
    """Heads and worker sets on those nodes, every device's share by its memory (a node with several GPUs gets one
    share per GPU): the current number of nodes and the fewest that hold the model's devices, plus one; bounded, so
    a large cluster stays polynomial."""
    devices = share_nodes(c)
    if len(devices) < 2:
        return [{}]
    unit = min(b for d in devices.values() for b in d)
    fewest = max(2, _fewest_nodes(devices, -(-c.model(tier.model).bytes // unit)))
    sizes = sorted({len(tier.nodes), fewest, fewest + 1} & set(range(2, len(devices) + 1)))
    options = []
    for size in sizes:
        for members in combinations(devices, size):
            for head in members:
                workers = [n for n in members if n != head]
                smallest = min(b for n in members for b in devices[n])
                shares = {n: [max(1, round(40 * b / smallest)) for b in devices[n]] for n in [head, *workers]}
                options.append({"head": head, "workers": workers,
                                "tensor_split": {n: v[0] if len(v) == 1 else v for n, v in shares.items()}})
                if len(options) >= MAX_OPTIONS_PER_TIER:
                    return options
    return options or [{}]


def _router_options(c: Cluster, tier: RouterTier) -> list[dict]:
    return [{"node": n} for n in share_nodes(c)] or [{}]


def _contexts(tier, floor: int | None) -> list[int]:
    """The tier's context, then smaller ones by halves down to the floor (none: the context stays)."""
    if floor is None or floor >= tier.ctx_size:
        return [tier.ctx_size]
    out, ctx = [tier.ctx_size], tier.ctx_size
    while ctx // 2 >= floor:
        ctx //= 2
        out.append(ctx)
    if out[-1] != floor:
        out.append(floor)
    return out


def _sized(tier, floor: int | None) -> list[dict]:
    """Contexts and server slots: without a floor the tier keeps both; with one, every context from the tier's own
    down to the floor, each with the slot counts whose share keeps the floor (llama-server without a unified KV
    cache gives each slot ctx_size / parallel)."""
    if floor is None:
        return [{"ctx_size": tier.ctx_size}]
    out = []
    for ctx in _contexts(tier, floor):
        for slots in sorted({tier.parallel, 1, 2, 4, 8, 16}):
            if ctx // slots >= floor:
                out.append({"ctx_size": ctx, "parallel": slots})
    return out or [{"ctx_size": tier.ctx_size}]


def _caches(c: Cluster, tier, allowed: list[str] | None) -> list[dict]:
    """The tier's KV cache types, then every pair from the allowed set (none given: the tier keeps its own). A
    quantized V cache needs flash attention, whose kernels start at compute capability 7.0 (Volta; crosscheck):
    where every GPU of the cluster has it, the pair comes with flash attention on; elsewhere only K is quantized."""
    if not allowed or not tier.workers:
        return [{}]
    own = {"cache_type_k": tier.cache_type_k, "cache_type_v": tier.cache_type_v, "flash_attn": tier.flash_attn}
    fa_ok = all(g.cc >= FLASH_ATTN_MIN_CC for n in c.nodes for g in n.gpu_devices)
    out = [{}]
    for k, v in product(allowed, allowed):
        option = {"cache_type_k": k, "cache_type_v": v}
        if v in QUANTIZED_CACHE_TYPES:
            if not fa_ok:
                continue
            option["flash_attn"] = "on"
        if any(option.get(key, own[key]) != own[key] for key in own) and option not in out:
            out.append(option)
    return out


def _apply(c: Cluster, changes: dict[str, dict]) -> Cluster:
    """The cluster with each tier's changes; a key `slurm.mem` changes a field of the tier's slurm section."""
    tiers = []
    for t in c.tiers:
        own = changes.get(t.name, {})
        update = {k: v for k, v in own.items() if "." not in k}
        job = {k.split(".", 1)[1]: v for k, v in own.items() if k.startswith("slurm.")}
        if job and t.slurm is not None:
            update["slurm"] = t.slurm.model_copy(update=job)
        tiers.append(t.model_copy(update=update))
    return c.model_copy(update={"tiers": tiers})


def job_requests(c: Cluster, tier, plan) -> dict:
    """The --mem and --gres a SLURM tier's job needs for this plan: the planned host memory with the margin the
    checks ask for (whole GiB), and per node as many GPUs as the tier uses on its busiest node (a router tier uses
    every GPU of its node; none: no gres). Asking for no more lets another tier's job share the node. At least 1 GiB:
    the process itself (the binary, CUDA's host allocations) is not in the plan."""
    if tier.slurm is None:
        return {}
    need = proposed_mem(c, tier, plan)  # the plan's charge, never at or below a measured failure
    per_node: dict[str, int] = {}
    for d in plan.devices:
        if d.gpu is not None and d.total:
            per_node[d.node] = per_node.get(d.node, 0) + 1
    gpus = max(per_node.values(), default=0)
    kind = (tier.slurm.gres or "gpu:1").split(":")
    gres = ":".join([*kind[:-1], str(gpus)]) if gpus else None
    return {"slurm.mem": mem_text(need), "slurm.gres": gres}


def _value(tier, key: str):
    """A tier's value by a changes key (`slurm.mem`: the mem of its slurm section)."""
    if key.startswith("slurm."):
        return getattr(tier.slurm, key.split(".", 1)[1]) if tier.slurm else None
    return getattr(tier, key)


def judge(c: Cluster, changes: dict[str, dict], known: dict[str, object] | None = None) -> Placement:
    """Plan the cluster with these changes, as `invoke plan` and `invoke check` would. `known` keeps the plans of
    tiers as written across one search (a tier's plan depends on it alone, not on where the others are)."""
    placed = _apply(c, changes)
    known = {} if known is None else known
    try:
        plans = {}
        for t in placed.tiers:
            key = t.model_dump_json()
            plans[t.name] = known[key] if key in known else known.setdefault(key, plan_tier(placed, t))
        cplan = plan_residency(placed, plans)
        problems = [message for _, message in plan_findings(placed, plans, cplan)]  # targets missed too: shown
        overfull = residency_findings(placed, cplan) + ram_findings(placed, cplan)
    except (ValueError, KeyError, ZeroDivisionError) as exc:  # a shape the planner cannot place
        return Placement(changes, False, False, 0, {}, {}, 0.0, [str(exc)])
    decode, recovery, met = {}, {}, 0
    for t in placed.tiers:
        plan = plans[t.name]
        decode[t.name] = plan.decode_bound_tps or 0.0
        recovery[t.name] = predict_load(placed, t, plan).recovery_s
        targets = placed.targets_for(t.name)
        if targets and targets.decode_tps and decode[t.name] >= targets.decode_tps.target:
            met += 1
        if targets and targets.recovery_s and recovery[t.name] <= targets.recovery_s.target:
            met += 1
    used = [load for load in cplan.loads if load.slot.model is not None]  # the GPUs
    headroom = min((load.headroom for load in used), default=0) / GIB
    margin = min((error_margin(placed, load) for load in used), default=0) / GIB
    # as `invoke check` asks: a job is killed at its --mem, and never asks at or below a measured failure
    short = [t.name for t in placed.tiers if t.slurm and not job_ask(placed, t, plans[t.name]).mem_ok]
    fits = all(p.fits for p in plans.values()) and margin >= 0 and not short
    apart = {frozenset((e.first, e.second)) for e in cplan.exclusions}
    together = all(frozenset((a, b)) not in apart for group in placed.planner.co_reside
                   for a, b in combinations(group, 2))
    return Placement(changes, not cplan.exclusions, fits and not overfull, met, decode, recovery, headroom,
                     problems, [f"{e.first} and {e.second}: {e.reason}" for e in cplan.exclusions], margin,
                     together, {t.name: t.parallel for t in placed.tiers},
                     {t.name: t.ctx_size // t.parallel for t in placed.tiers}, preempted_together(placed))


def preempted_together(c: Cluster) -> list[str]:
    """Nodes where one preemption takes several tiers down: SLURM tiers whose QoS another QoS preempts, sharing the
    node (a VASP job there ends both jobs)."""
    preempted = {q for site in [c.slurm_site] if site for qos in site.qos for q in qos.preempts}
    on_node: dict[str, list[str]] = {}
    for t in c.tiers:
        if t.manager == "slurm" and t.slurm and t.slurm.qos in preempted:
            for node in dict.fromkeys(t.nodes):
                on_node.setdefault(node, []).append(t.name)
    return [f"{node}: {', '.join(tiers)}" for node, tiers in on_node.items() if len(tiers) > 1]


def error_margin(c: Cluster, load) -> float:
    """Bytes a GPU keeps beyond what the planner's measured error could add (weights_error_pct of the weights,
    compute_error_pct of the compute buffers): its headroom plus the headroom_pct the plan already keeps back,
    less that error. A placement is safe when every GPU's margin is at least 0."""
    kept_back = load.slot.capacity / (1 - c.planner.headroom_pct / 100) - load.slot.capacity
    error = sum(s.weights * c.planner.weights_error_pct / 100
                + (s.compute + s.pool) * c.planner.compute_error_pct / 100 for s in load.shares)
    return load.headroom + kept_back - error


def solve(c: Cluster, min_ctx: dict[str, int] | None = None, best: int = 5,
          cache_types: list[str] | None = None) -> list[Placement]:
    """The best placements, best first (the file's own placement is among those judged: no change). Every
    combination while there are at most MAX_PLACEMENTS; past that, one tier at a time from the file's placement,
    keeping each tier's best while the others stay (a few passes: polynomial in tiers and options). `cache_types`:
    the KV cache types an RPC tier may be given (default: each keeps its own)."""
    per_tier = []
    for t in c.tiers:
        floor = (min_ctx or {}).get(t.name)
        shapes = (_rpc_options if t.workers else _router_options)(c, t)
        per_tier.append((t, [{**shape, **cache, **sized} for shape, cache, sized in
                             product(shapes, _caches(c, t, cache_types), _sized(t, floor))]))
    judged: dict[str, Placement] = {}
    known: dict[str, object] = {}

    def judged_once(changes: dict[str, dict]) -> Placement:
        changes = {name: ch for name, ch in changes.items() if ch}
        key = repr(sorted((k, sorted(v.items())) for k, v in changes.items()))
        if key not in judged:
            judged[key] = judge(c, changes, known)
        return judged[key]

    def best_of(changes: dict[str, dict]) -> Placement:
        """These shapes as they are, or with each SLURM job's --mem and --gres fitted to its plan, the better."""
        plain = judged_once(changes)
        fitted = {t.name: {**changes.get(t.name, {}),
                           **{k: v for k, v in job_requests(c, t, known[t.model_dump_json()]).items()
                              if v != _value(t, k)}}
                  for t in _apply(c, changes).tiers if t.model_dump_json() in known}
        fitted = {name: ch for name, ch in fitted.items() if ch}
        if fitted == {name: ch for name, ch in changes.items() if ch}:  # no SLURM job asks other than written
            return plain
        return min(plain, judged_once(fitted), key=lambda p: p.rank)

    total = 1
    for _, options in per_tier:
        total *= len(options)
    if total <= MAX_PLACEMENTS:
        for combo in product(*(options for _, options in per_tier)):
            best_of({t.name: _differences(t, o) for (t, _), o in zip(per_tier, combo)})
    else:
        current: dict[str, dict] = {}
        for _ in range(3):
            before = best_of(current).rank
            for t, options in per_tier:
                tried = [best_of({**current, t.name: _differences(t, o)}) for o in options]
                current = dict(min(tried, key=lambda p: p.rank).changes)
            if best_of(current).rank == before:
                break
    return sorted(judged.values(), key=lambda p: p.rank)[:best]


def _differences(tier, option: dict) -> dict:
    """The option's values that differ from the tier's (a tensor split in the same proportions is the same)."""
    return {k: v for k, v in option.items()
            if not (_value(tier, k) == v or (k == "tensor_split" and _proportions(_value(tier, k)) == _proportions(v)))}


def _proportions(split: dict | None) -> dict | None:
    """A tensor split as each device's fraction of the whole, rounded (1:1:1 and 40:40:40 are the same split)."""
    if not split:
        return split
    shares = {(node, i): float(v) for node, value in split.items()
              for i, v in enumerate(value if isinstance(value, list) else [value])}
    total = sum(shares.values()) or 1.0
    return {key: round(v / total, 6) for key, v in shares.items()}


def yaml_edit(text: str, c: Cluster, lines: dict[tuple, int], changes: dict[str, dict]) -> str | None:
    """The cluster file's text with the placement written in (comments kept): each changed key's line gets its
    new value, and a key the tier does not write yet gets a line of its own after the tier's last line; None when
    a key's value is not on its own line (block style), so the change is shown, not written."""
    out = text.split("\n")
    added: dict[int, list[str]] = {}  # 0-based line index -> lines to insert after it
    for name, fields in changes.items():
        index = [t.name for t in c.tiers].index(name)
        for key, value in fields.items():
            if "." in key:  # a field of a section (slurm.mem): edited inside the section's one-line flow mapping
                section, field_name = key.split(".", 1)
                line = lines.get(("tiers", index, section, field_name)) or lines.get(("tiers", index, section))
                if line is None or not _flow_edit(out, line - 1, field_name, value):
                    return None
                continue
            line = lines.get(("tiers", index, key))
            if line is None:
                last, indent = _tier_end(out, lines, index)
                added.setdefault(last, []).append(f"{indent}{key}: {_flow(value)}")
                continue
            current = out[line - 1]
            prefix = f"{key}: "
            at = current.find(prefix)
            if at < 0 or current[:at].strip() not in ("", "-"):
                return None
            comment = current.find("  #", at)
            tail = current[comment:] if comment >= 0 else ""
            out[line - 1] = current[:at] + prefix + _flow(value) + tail
    for last in sorted(added, reverse=True):
        out[last + 1:last + 1] = added[last]
    return "\n".join(out)


def _flow_edit(out: list[str], at: int, key: str, value: object) -> bool:
    """Set `key` inside the one-line flow mapping on line `at` (added before its closing brace when it is not
    there); False when the line holds no such mapping."""
    line = out[at]
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end < start:
        return False
    inner = line[start + 1:end]
    found = re.search(rf"(^|,)(\s*){re.escape(key)}:\s*[^,]*", inner)
    if found:
        inner = inner[:found.start()] + f"{found.group(1)}{found.group(2)}{key}: {_flow(value)}" + inner[found.end():]
    else:
        inner = f"{inner.rstrip()}, {key}: {_flow(value)}"
    out[at] = line[:start + 1] + inner + line[end:]
    return True


def _tier_end(out: list[str], lines: dict[tuple, int], index: int) -> tuple[int, str]:
    """The 0-based index of a tier's last line in the file and the indentation of its keys."""
    own = {path: n for path, n in lines.items() if path[:2] == ("tiers", index) and len(path) >= 3}
    last = max(own.values()) - 1
    first_key = out[min(n for path, n in own.items() if len(path) == 3 and path[2] != "name") - 1]
    return last, " " * (len(first_key) - len(first_key.lstrip()))


def _flow(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str) and yaml.safe_load(value) != value:  # "on" would read as true: quote it
        return json.dumps(value)
    return str(value)
