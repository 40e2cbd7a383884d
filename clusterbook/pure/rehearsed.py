"""Figures measured at full size (the file's rehearsals) beside what the planner plans for the same settings."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import Cluster, Rehearsal, RehearsedSettings, RpcTier
from clusterbook.pure.planner.capacity import GIB, plan_rpc_tier
from clusterbook.pure.planner.loadtime import predict_load
from clusterbook.pure.planner.prompt import prompt_lengths, prompt_time

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


ON_CARD = {"decode_tps": ("bandwidth_gbs",), "prompt_s": ("bandwidth_gbs", "tflops"),
           "prompt_tps": ("bandwidth_gbs", "tflops")}  # figures compared with the planner on the card they ran on


def on_card(c: Cluster, **speeds: float | None) -> Cluster:
    """The cluster with every GPU's declared speeds (bandwidth_gbs, tflops) those of another card; its memory stays
    (a rehearsal holds the card to this cluster's)."""
    nodes = [n.model_copy(update={"gpus": [g.model_copy(update=speeds) for g in n.gpus]}) for n in c.nodes]
    return c.model_copy(update={"nodes": nodes})


def same_settings(tier: RpcTier, settings: RehearsedSettings) -> bool:
    """Whether a rehearsal ran with the tier's own settings."""
    return all(getattr(tier, name) == getattr(settings, name) for name in RehearsedSettings.model_fields)


def planned_for(c: Cluster, r: Rehearsal) -> float | None:
    """The planner's figure for the rehearsed tier with the rehearsal's settings (a speed on the card it ran on:
    None where the rehearsal does not say that card's speeds)."""
    tier = c.tier(r.tier)
    if not tier.workers:
        return None
    s = r.settings
    tier = tier.model_copy(update={**s.model_dump(), "batch_size": s.ubatch_size})
    if r.what in ON_CARD:
        speeds = {"bandwidth_gbs": r.card_bandwidth_gbs, "tflops": r.card_tflops}
        if not all(speeds[name] for name in ON_CARD[r.what]):
            return None
        c = on_card(c, **{name: speeds[name] for name in ON_CARD[r.what]})
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
    estimate = prompt_time(c, tier, prompt_lengths(tier)[-1], plan=plan)  # prompt_tps: a prompt that fills it
    return estimate.tps if estimate else None


def compared(c: Cluster, tier: str) -> list[Compared]:
    return [Compared(r, planned_for(c, r)) for r in c.rehearsals if r.tier == tier]
