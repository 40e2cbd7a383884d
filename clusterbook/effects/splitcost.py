"""What splitting a tier over RPC costs in decode speed: the tier against its model on one device, engine and server."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clusterbook.effects import tuning
from clusterbook.model.schema import Cluster, RpcTier
from clusterbook.pure.planner.capacity import TierPlan


@dataclass
class SplitCost:
    """Decode tokens/s of the tier and of its model on the head's first device alone, measured two ways.

    engine: llama-bench (tg, `tokens` generated) with the tier's flags, over the tier's RPC workers or on one device.
    served: llama-server over HTTP with the tier's flags (timings.predicted_per_second, median of the baseline
    prompts). A side is None where the model does not fit one device by the plan.
    """

    engine_tier: float
    engine_one: float | None
    served_tier: float
    served_one: float | None
    tokens: int = 128

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    @property
    def engine_ratio(self) -> float | None:
        return self._ratio(self.engine_tier, self.engine_one)

    @property
    def served_ratio(self) -> float | None:
        return self._ratio(self.served_tier, self.served_one)

    @property
    def served_vs_engine_one(self) -> float | None:
        return self._ratio(self.served_tier, self.engine_one)

    def to_json(self) -> dict:
        return {**self.__dict__, "engine_ratio": self.engine_ratio, "served_ratio": self.served_ratio,
                "served_vs_engine_one": self.served_vs_engine_one}


def fits_one_device(plan: TierPlan, head: str) -> bool:
    """Whether the whole model, its KV cache and one compute buffer fit the head's first device by the plan."""
    first = next((d for d in plan.devices if d.node == head), None)
    if first is None or first.capacity is None:
        return first is not None  # a CPU device: RAM is not planned, try it
    need = sum(d.weights + d.kv for d in plan.devices) + max(d.compute + d.pool for d in plan.devices) + first.overhead
    return need <= first.capacity


def engine_decode(c: Cluster, tier: RpcTier, gpus: str, *, one_device: bool, reps: int = 3,
                  tokens: int = 128) -> float:
    """llama-bench's decode tokens/s with the tier's own flags; over its RPC workers, or on `gpus` alone."""
    argv = tuning.llama_bench_argv(c, tier, tier.flash_attn, tier.cache_type_k, tier.cache_type_v,
                                   str(tier.ubatch_size), str(tier.batch_size), reps=reps, prompt=0, gen=tokens,
                                   rpc=not one_device)
    rows = tuning.run_llama_bench(c, argv, gpus)
    return round(next(r["avg_ts"] for r in rows if r["n_gen"]), 1)


def served_decode(samples: list[float]) -> float:
    """One figure from the server's decode samples: their median."""
    return round(statistics.median(samples), 1)


def markdown(cost: SplitCost, devices: int) -> str:
    def cell(v: float | None) -> str:
        return f"{v:.1f}" if v else "does not fit one device"

    def share(v: float | None) -> str:
        return f"{v:.1%}" if v else "–"

    lines = ["", f"What the split costs: the tier ({devices} devices, layers over RPC) against its model on the "
                 "head's first device alone, the same flags, measured two ways.", "",
             "| measured with | the tier | one device | tier / one device |", "|---|---|---|---|",
             f"| llama-bench (tg{cost.tokens}) | {cost.engine_tier:.1f} | {cell(cost.engine_one)} | "
             f"{share(cost.engine_ratio)} |",
             f"| llama-server over HTTP | {cost.served_tier:.1f} | {cell(cost.served_one)} | "
             f"{share(cost.served_ratio)} |"]
    if cost.served_vs_engine_one:
        lines += ["", f"Served tier against llama-bench on one device: {share(cost.served_vs_engine_one)}. "
                      "The distance between the two rows is llama-server's own per-token path (sampling, "
                      "bookkeeping), which one device pays too."]
    return "\n".join(lines) + "\n"

