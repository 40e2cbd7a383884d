"""Figures measured at full size (the file's rehearsals) beside what the planner plans for the same settings."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import Cluster, Rehearsal, RpcTier
from clusterbook.pure.planner.capacity import GIB, plan_rpc_tier
from clusterbook.pure.planner.loadtime import predict_load
from clusterbook.pure.planner.prompt import prompt_time

UNITS = {"peak_gib": "GiB", "load_s": "s", "recovery_s": "s", "decode_tps": "tok/s", "prompt_tps": "tok/s",
         "prompt_s": "s"}
WHAT = {"peak_gib": "peak memory through a full prompt", "load_s": "load (start to /health)",
        "recovery_s": "back after a worker's SIGKILL", "decode_tps": "decode, empty context",
        "prompt_tps": "prompt processing, full context", "prompt_s": "a prompt before its first token"}


@dataclass(frozen=True)
class Compared:
    """One rehearsed figure and the planner's for the same settings (None where the planner has none)."""

    rehearsal: Rehearsal
    planned: float | None

    @property
    def ratio(self) -> float | None:
        return self.rehearsal.value / self.planned if self.planned else None

    @property
    def settings_text(self) -> str:
        s = self.rehearsal.settings
        prompt = f"; a prompt of {self.rehearsal.prompt_tokens:,}" if self.rehearsal.prompt_tokens else ""
        return (f"{s.ctx_size:,} tokens, ubatch {s.ubatch_size}, flash attention {s.flash_attn}, "
                f"K {s.cache_type_k} V {s.cache_type_v}{prompt}")


def planned_for(c: Cluster, r: Rehearsal) -> float | None:
    """The planner's figure for the rehearsed tier with the rehearsal's settings."""
    tier = c.tier(r.tier)
    if not isinstance(tier, RpcTier):
        return None
    s = r.settings
    tier = tier.model_copy(update={**s.model_dump(), "batch_size": s.ubatch_size})
    on_card = r.what == "decode_tps" and r.card_bandwidth_gbs or \
        r.what in ("prompt_s", "prompt_tps") and r.card_bandwidth_gbs and r.card_tflops
    if not on_card and r.what in ("decode_tps", "prompt_s", "prompt_tps"):
        return None
    if on_card:  # the planner's figure for the card it ran on
        card = {"bandwidth_gbs": r.card_bandwidth_gbs} | ({"tflops": r.card_tflops} if r.card_tflops else {})
        nodes = [n.model_copy(update={"gpus": [g.model_copy(update=card) for g in n.gpus]}) for n in c.nodes]
        c = c.model_copy(update={"nodes": nodes})
    plan = plan_rpc_tier(c, tier)
    if r.what == "peak_gib":
        return next((d.total / GIB for d in plan.devices if d.device == r.device), None)
    if r.what == "load_s":
        return predict_load(c, tier, plan).load_s
    if r.what == "recovery_s":
        return predict_load(c, tier, plan).recovery_s
    if r.what == "decode_tps":
        return plan.decode_bound_tps
    if r.what == "prompt_s":
        estimate = prompt_time(c, tier, r.prompt_tokens, plan=plan)
        return estimate.seconds if estimate else None
    estimate = prompt_time(c, tier, s.ctx_size - 64, plan=plan)  # prompt_tps: through a prompt that fills it
    return estimate.tps if estimate else None


def compared(c: Cluster, tier: str) -> list[Compared]:
    return [Compared(r, planned_for(c, r)) for r in c.rehearsals if r.tier == tier]
