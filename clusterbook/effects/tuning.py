"""Tune a tier with llama-bench over its RPC workers: a small grid of the settings clusterbook controls."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass

from clusterbook.effects.console import Failed
from clusterbook.model.schema import FLASH_ATTN_MIN_CC, QUANTIZED_CACHE_TYPES, Cluster, RpcTier
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.render.artifacts import ld_library_path


@dataclass(frozen=True)
class Point:
    """One measured grid point: settings and llama-bench's average tokens/s."""

    ubatch: int
    batch: int
    flash_attn: bool
    cache_k: str
    cache_v: str
    decode_tps: float
    prompt_tps: float

    def settings(self) -> dict:
        return {"ubatch_size": self.ubatch, "batch_size": self.batch, "flash_attn": "on" if self.flash_attn else "off",
                "cache_type_k": self.cache_k, "cache_type_v": self.cache_v}


def flash_allowed(c: Cluster, tier: RpcTier) -> bool:
    gpus = [g for n in tier.nodes for g in c.node(n).gpu_devices]
    return bool(gpus) and all(g.cc >= FLASH_ATTN_MIN_CC for g in gpus)


def grid(c: Cluster, tier: RpcTier) -> list[tuple[bool, str, str]]:
    """(flash attention, K type, V type) combinations to try; each with ubatch 256/512 and batch 512/2048."""
    combos = [(False, "f16", "f16"), (False, "q8_0", "f16")]
    if flash_allowed(c, tier):
        combos += [(True, "f16", "f16"), (True, "q8_0", "q8_0")]
    return [(fa, k, v) for fa, k, v in combos if not (v in QUANTIZED_CACHE_TYPES and not fa)]


def llama_bench_argv(c: Cluster, tier: RpcTier, fa: str, k: str, v: str, ubatches: str, batches: str,
                     reps: int = 3, prompt: int = 512, gen: int = 128, rpc: bool = True) -> list[str]:
    """llama-bench with the tier's split over its RPC workers, or (rpc=False) the same flags on one device."""
    model = os.path.join(c.storage.models_dir, c.model(tier.model).file)
    split = ["-rpc", ",".join(topo.rpc_endpoints(c, tier)), "-sm", "layer",
             "-ts", topo.tensor_split_flag(c, tier).replace(",", "/")] if rpc else []
    return [fl.binary(c, c.engine.bench_binary), "-m", model, *split, "-ngl", str(topo.n_gpu_layers(c, tier)),
            "-p", str(prompt), "-n", str(gen), "-r", str(reps), "-ub", ubatches, "-b", batches,
            "-fa", fa, "-ctk", k, "-ctv", v, "-o", "json"]


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def run_llama_bench(c: Cluster, argv: list[str], gpus: str) -> list[dict]:
    env = {**os.environ, "LD_LIBRARY_PATH": ld_library_path(c), "CUDA_VISIBLE_DEVICES": gpus}
    if not os.access(argv[0], os.X_OK):
        raise Failed(f"{argv[0]} is not here: build llama-bench (deploy.install builds it) or pass --install-dir")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise Failed(f"llama-bench failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return json.loads(proc.stdout)


def points(rows: list[dict]) -> list[Point]:
    """Pair each setting's prompt (pp) and generation (tg) rows into points."""
    found: dict[tuple, dict] = {}
    for r in rows:
        key = (r["n_ubatch"], r["n_batch"], bool(r["flash_attn"] == 1 or r["flash_attn"] is True), r["type_k"],
               r["type_v"])
        entry = found.setdefault(key, {})
        entry["decode" if r["n_gen"] else "prompt"] = r["avg_ts"]
    return [Point(*key, entry.get("decode", 0.0), entry.get("prompt", 0.0)) for key, entry in found.items()]


QUICK = {"reps": 1, "prompt": 128, "gen": 32}  # bench.tune --quick: the whole path, a twelfth of the work


def tune(c: Cluster, tier: RpcTier, gpus: str, progress=lambda text: None,
         quick: bool = False) -> tuple[list[Point], Point, Point]:
    """Measure the grid, pick the best decode point, and measure it again to show it holds: the better of two runs,
    as the best is the better of the grid's (one run alone, on a busy CPU, has measured half of it)."""
    measured: list[Point] = []
    size = QUICK if quick else {}
    for fa, k, v in grid(c, tier):
        progress(f"llama-bench: flash attention {'on' if fa else 'off'}, K {k}, V {v}, ubatch 256/512, batch 512/2048")
        measured += points(run_llama_bench(c, llama_bench_argv(c, tier, _on(fa), k, v, "256,512", "512,2048", **size),
                                           gpus))
    best = max(measured, key=lambda p: p.decode_tps)
    runs = []
    for i in (1, 2):
        progress(f"llama-bench: the best point again ({i} of 2)")
        runs += points(run_llama_bench(c, llama_bench_argv(c, tier, _on(best.flash_attn), best.cache_k, best.cache_v,
                                                            str(best.ubatch), str(best.batch), **size), gpus))
    return measured, best, max(runs, key=lambda p: p.decode_tps)


def change_to_make(tier: RpcTier, best: Point) -> list[str]:
    """The lines to change in the cluster file's tier, if any."""
    current = {"ubatch_size": tier.ubatch_size, "batch_size": tier.batch_size, "flash_attn": tier.flash_attn,
               "cache_type_k": tier.cache_type_k, "cache_type_v": tier.cache_type_v}
    return [f"{key}: {value}   # was {current[key]}" for key, value in best.settings().items() if current[key] != value]
