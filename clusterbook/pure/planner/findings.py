"""Checks that need the plan: tiers that don't fit, targets above the bound, SLURM memory, refuted claims."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.problems import Path
from clusterbook.model.quantization import weights_bytes
from clusterbook.model.schema import Claim, Cluster
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import GIB, TierPlan
from clusterbook.pure.planner.jobask import job_ask, mem_text, slurm_need
from clusterbook.pure.planner.loadtime import (
    cold_start_s,
    default_wait_cap_s,
    hold_s,
    new_job_hold_s,
    predict_load,
    whole_s,
)
from clusterbook.pure.planner.residency import plan_residency, ram_findings, residency_findings
from clusterbook.pure.planner.shape import from_declared


@dataclass(frozen=True)
class ClaimVerdict:
    """A seed's claim next to the computed figure."""

    claim: Claim
    computed: float | None
    refuted: bool | None  # None: cannot be computed

    @property
    def unit(self) -> str:
        return {"weights_gb": "GB", "decode_tps": "tok/s", "context": "tokens"}[self.claim.metric]


MIN_SLOT_CTX = 1024  # tokens a server slot keeps at least: below it a request's prompt and answer do not fit


class ClaimPlans(dict):
    """The tiers' plans, and each tier's plan with a claim's model once it is made: many claims of one model and
    tier plan it once (a file of 10,000 claims checks in linear time)."""


def evaluate_claim(c: Cluster, claim: Claim, plans: dict[str, TierPlan]) -> ClaimVerdict:
    if claim.metric == "weights_gb":
        if claim.model:
            computed = c.model(claim.model).bytes / 1e9
        else:
            size = weights_bytes(claim.params_b or 0, claim.quantization or "")
            computed = size / 1e9 if size else None
        return ClaimVerdict(claim, computed, None if computed is None else claim.claimed < 0.9 * computed)
    tier = c.tier(claim.tier) if claim.tier else None
    if not (tier and tier.workers) or not claim.model:
        return ClaimVerdict(claim, None, None)
    key = f"{tier.name}:{claim.model}"
    plan = plans.get(key) or plan_tier(c, tier.model_copy(update={"model": claim.model}),
                                       from_declared(c.model(claim.model)))
    if isinstance(plans, ClaimPlans):
        plans.setdefault(key, plan)
    if claim.metric == "context":
        fits = plan.max_ctx or 0
        return ClaimVerdict(claim, fits, claim.claimed > fits)
    bound = plan.decode_bound_tps
    return ClaimVerdict(claim, bound, None if bound is None else claim.claimed > bound)


def _restart_text(load) -> str:
    """What comes before the head loads again after a worker crash: its restart, or the other workers' read-back of
    the shares they keep where that is longer."""
    if load.kept and load.others_rehash_s > load.restart_s:
        return f"the other workers' read-back of their shares {load.others_rehash_s:.1f} s"
    return f"{load.restart_kind} {load.restart_s:g} s"


def plan_findings(c: Cluster, plans: dict[str, TierPlan], cplan=None) -> list[tuple[Path, str]]:
    """Problems found with the plan, as (path, message), for `invoke check`; `cplan`: the residency plan of these
    plans, when the caller has it already."""
    out: list[tuple[Path, str]] = []
    for i, tier in enumerate(c.tiers):
        plan = plans[tier.name]
        idle = [d for d in plan.devices if d.blocks == 0 and not d.output]
        if tier.workers and idle:
            out.append((("tiers", i, "tensor_split"), f"tier {tier.name}'s split gives {idle[0].device} on "
                        f"{idle[0].node} no layer: a worker that holds nothing still costs a hop per token"))
        if tier.api == "chat" and tier.ctx_size // tier.parallel < MIN_SLOT_CTX:  # an embedding has no answer
            out.append((("tiers", i, "parallel"), f"{tier.parallel} slots share {tier.ctx_size:,} tokens: "
                        f"{tier.ctx_size // tier.parallel:,} each, fewer than {MIN_SLOT_CTX:,} (a prompt and "
                        "its answer); give fewer slots or a larger context"))
        for d in plan.devices:
            if not d.fits:
                where = f"{d.device} on {d.node}" + (f" ({d.gpu})" if d.gpu else "")
                hint = f"; the largest context that fits is {plan.max_ctx}" if plan.max_ctx else ""
                out.append((("tiers", i, "ctx_size"),
                            f"tier {tier.name} does not fit {where}: needs {d.total / GIB:.1f} GiB of "
                            f"{d.capacity / GIB:.1f} GiB usable, short by {-d.headroom / GIB:.1f} GiB{hint}"))
        if tier.slurm:
            ask = job_ask(c, tier, plan)
            if ask.failed is not None and ask.mem <= ask.failed:
                out.append((("tiers", i, "slurm", "mem"),
                            f"--mem={tier.slurm.mem} is not above {tier.slurm.mem_failed}, which was measured to fail "
                            "(slurm.mem_failed: the job killed at its limit): ask more"))
            elif ask.mem < ask.planned:
                out.append((("tiers", i, "slurm", "mem"),
                            f"--mem={tier.slurm.mem} leaves less than {c.planner.slurm_mem_margin_pct:g} % over what "
                            f"the plan charges the job ({slurm_need(plan) / GIB:.1f} GiB: the model file in page "
                            f"cache, KV cache, buffers); give at least {mem_text(ask.planned)}"))
    for i, targets in enumerate(c.targets):
        tier = next((t for t in c.tiers if t.name == targets.tier), None)
        if tier is None or not targets.recovery_s or tier.name not in plans or not tier.workers:
            continue
        load = predict_load(c, tier, plans[tier.name])
        if load.recovery_s > targets.recovery_s.target:
            out.append((("targets", i, "recovery_s", "target"),
                        f"tier {tier.name} cannot come back within {targets.recovery_s.target:g} s after a worker "
                        f"crash: predicted {whole_s(load.recovery_s)} s ({_restart_text(load)} + "
                        + (f"the model file locked in {load.locked_s:.1f} s + " if load.locked_s else "")
                        + f"its own share {load.local_bytes / 1e9:.1f} GB in {load.local_s:.1f} s + the workers' "
                        + (f"kept shares hashed in {load.others_hash_s:.1f} s + the crashed worker's share again at "
                           f"{load.rpc_rate_gbs:g} GB/s in {load.resent_s:.0f} s)" if load.kept else
                           f"{load.rpc_bytes / 1e9:.1f} GB through RPC at {load.rpc_rate_gbs:g} GB/s in "
                           f"{load.rpc_s:.0f} s)")))
    out += on_demand_findings(c, plans) + hold_findings(c, plans)
    cplan = cplan or plan_residency(c, plans)
    out += residency_findings(c, cplan) + ram_findings(c, cplan) + co_reside_findings(c, cplan)
    for i, targets in enumerate(c.targets):
        plan = plans.get(targets.tier)
        if plan and targets.decode_tps and plan.decode_bound_tps is not None \
                and targets.decode_tps.target > plan.decode_bound_tps:
            out.append((("targets", i, "decode_tps", "target"),
                        f"{targets.decode_tps.target:g} tok/s is above the decode bound of "
                        f"{plan.decode_bound_tps:.1f} tok/s for {plan.model} on tier {targets.tier}'s hardware"))
    with_claims = ClaimPlans(plans)
    for i, decision in enumerate(c.decisions):
        for j, claim in enumerate(decision.claims):
            verdict = evaluate_claim(c, claim, with_claims)
            if verdict.refuted is False:
                out.append((("decisions", i, "claims", j),
                            f"the claim ({claim.claimed:g} {verdict.unit}) is consistent with the computed "
                            f"{verdict.computed:,.1f} {verdict.unit}: the decision no longer refutes it"))
            elif verdict.refuted is None:
                out.append((("decisions", i, "claims", j), "the planner cannot compute this claim: give a model "
                                                           "in the file, or params_b and a known quantization"))
    return out


def co_reside_findings(c: Cluster, cplan) -> list[tuple[Path, str]]:
    """A group of planner.co_reside in which the plan makes one tier wait for another."""
    out: list[tuple[Path, str]] = []
    for i, group in enumerate(c.planner.co_reside):
        apart = [e for e in cplan.exclusions if e.first in group and e.second in group]
        if apart:
            out.append((("planner", "co_reside", i),
                        f"tiers {', '.join(group)} must serve at the same time, but the plan says "
                        + "; ".join(f"{e.first} and {e.second} cannot: {e.reason}" for e in apart)))
    return out


def hold_findings(c: Cluster, plans: dict[str, TierPlan]) -> list[tuple[Path, str]]:
    """The gateway's hold of each routed tier must end within the tier's own request timeout: a request held
    longer would time out at nginx instead of getting its 503 with Retry-After."""
    if c.gateway is None:
        return []
    out: list[tuple[Path, str]] = []
    for route in c.gateway.routes:
        tier = c.tier(route.tier)
        if tier.name in plans and (new_job_hold_s(c, tier, plans[tier.name]) or 0) > tier.timeout_s:
            out.append((("gateway", "hold_margin_s"),
                        f"while tier {tier.name}'s job is away its requests would be held "
                        f"{new_job_hold_s(c, tier, plans[tier.name])} s (its new job's predicted start and load + "
                        f"{c.gateway.hold_margin_s} s), longer than its timeout_s {tier.timeout_s}: raise timeout_s "
                        "or shorten the requeue hold"))
        elif tier.name in plans and hold_s(c, tier, plans[tier.name]) > tier.timeout_s:
            out.append((("gateway", "hold_margin_s"),
                        f"tier {tier.name}'s requests would be held {hold_s(c, tier, plans[tier.name])} s (its "
                        f"predicted recovery {whole_s(predict_load(c, tier, plans[tier.name]).recovery_s)} s + "
                        f"{c.gateway.hold_margin_s} s), longer than its timeout_s {tier.timeout_s}: give a margin of "
                        f"at most {tier.timeout_s - (hold_s(c, tier, plans[tier.name]) - c.gateway.hold_margin_s)} s"))
    return out


def on_demand_findings(c: Cluster, plans: dict[str, TierPlan]) -> list[tuple[Path, str]]:
    """An on-demand tier's idle time and wait cap against its predicted cold start: released sooner than it takes
    to start, it would spend more time starting than serving; a cap below the start turns every first request
    into a 503."""
    out: list[tuple[Path, str]] = []
    for i, tier in enumerate(c.tiers):
        if tier.on_demand is None or tier.manager != "slurm" or tier.name not in plans:
            continue
        cold = cold_start_s(c, tier, plans[tier.name])
        parts = (f"predicted cold start {whole_s(cold)} s: SLURM's submission and start "
                 f"{c.planner.slurm_submit_start_s:g} s + the load {whole_s(cold - c.planner.slurm_submit_start_s)} s")
        if tier.on_demand.idle_s < cold:
            out.append((("tiers", i, "on_demand", "idle_s"),
                        f"tier {tier.name} would be released after {tier.on_demand.idle_s} s idle, sooner than it "
                        f"starts ({parts}): give at least {whole_s(cold)} s"))
        if tier.on_demand.wait_cap_s is not None and tier.on_demand.wait_cap_s < cold:
            out.append((("tiers", i, "on_demand", "wait_cap_s"),
                        f"tier {tier.name}'s first request would give up after {tier.on_demand.wait_cap_s} s, "
                        f"before the tier can answer ({parts}): give at least {whole_s(cold)} s, or leave it out "
                        f"(default {default_wait_cap_s(c, tier, plans[tier.name])} s)"))
    return out
