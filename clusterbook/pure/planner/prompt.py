"""How long a tier reads a prompt before its first token: ubatch after ubatch, each device multiplies its weights
(dequantized first where prompt batches go through cuBLAS), attends over the cache so far, and hands on to the next."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import QUANTIZED_CACHE_TYPES, Cluster, RpcTier, Tier
from clusterbook.pure.planner.capacity import DevicePlan, TierPlan, kv_cells, plan_rpc_tier, row_size
from clusterbook.pure.planner.shape import Shape, block_params, from_declared

PROMPT_LENGTHS = (8192, 16384, 32768)  # the lengths the API page shows (up to the tier's context)
MMQ_BATCH = 64  # ggml-cuda (mmq.cu, MMQ_DP4A_MAX_BATCH_SIZE): smaller batches use llama.cpp's own kernels


@dataclass(frozen=True)
class PromptTime:
    """A prompt's predicted time in the server before its first token, in parts (seconds)."""

    tokens: int
    ubatch: int
    weights_s: float  # the weights' matrix products, and their dequantization once per ubatch on the cuBLAS path
    attention_s: float  # each block's attention over the cache so far
    hops_s: float  # each ubatch's activations handed to the next RPC device, and its round trip

    @property
    def seconds(self) -> float:
        return self.weights_s + self.attention_s + self.hops_s

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class Rates:
    """What a device reaches on prompt batches: bytes/s through memory, FLOP/s in products of weights and in flash
    attention, and whether its weights are dequantized for cuBLAS."""

    memory: float
    gemm: float
    flash: float
    cublas: bool


def device_rates(c: Cluster, d: DevicePlan) -> Rates | None:
    """A GPU: the planner's measured shares of its declared bandwidth and FP16 tensor rate; a CPU: its declared
    figures as they are; None where the file declares no speed for the device."""
    node = c.node(d.node)
    p = c.planner
    if d.gpu is None:
        if not (node.cpu_gflops and node.cpu_bandwidth_gbs):
            return None
        return Rates(node.cpu_bandwidth_gbs * 1e9, node.cpu_gflops * 1e9, node.cpu_gflops * 1e9, False)
    gpu = next(g for g in node.gpu_devices if g.model == d.gpu)
    if not gpu.tflops:
        return None
    return Rates(gpu.bandwidth_gbs * 1e9 * p.prompt_memory_pct / 100, gpu.tflops * 1e12 * p.prompt_gemm_pct / 100,
                 gpu.tflops * 1e12 * p.prompt_flash_pct / 100, gpu.prompt_via_cublas)


def prompt_time(c: Cluster, tier: RpcTier, tokens: int, plan: TierPlan | None = None,
                shape: Shape | None = None) -> PromptTime | None:
    """The server's time for a prompt of `tokens` on an RPC tier (no cache reused), or None where a device of it has
    no declared speed. Per ubatch and device: the weights' products at the planner's share of the card's FLOP rate,
    plus, on the cuBLAS path (a V100S), each weight read, written as F16 and read again by the product; per block,
    the attention: without flash attention every head's scores over the whole cache so far, written, soft-maxed and
    read back (prompt_scores_bytes each, at the planner's share of the bandwidth) and multiplied, with it the
    product alone over the causal half of the newest ubatch (the kernel skips masked tiles) at the flash kernel's
    share; per RPC device, one hop and the ubatch's activations over the RPC network."""
    shape = shape or from_declared(c.model(tier.model))
    plan = plan or plan_rpc_tier(c, tier, shape)
    p = c.planner
    flash = tier.flash_attn == "on"
    ub = min(tier.ubatch_size, tier.batch_size)
    per_block = block_params(shape.heads, shape.kv_heads, shape.head_dim, shape.embedding, shape.feed_forward)
    fabric = c.networks[c.rpc_network].bandwidth_gbps * 1e9 / 8
    starts = range(0, tokens, ub)
    weights = attention = 0.0
    for d in plan.devices:
        if not d.blocks and not d.output:
            continue
        rates = device_rates(c, d)
        if rates is None:
            return None
        params = d.blocks * per_block
        for start in starts:
            u = min(ub, tokens - start)
            weights += 2 * params * u / rates.gemm
            if rates.cublas and u >= MMQ_BATCH:
                weights += (d.weights + 4 * params) / rates.memory
            elif d.gpu is not None:
                weights += d.weights / rates.memory
            attention += d.blocks * _attention_s(c, tier, shape, start, u, flash, rates)
        if d.output:
            weights += shape.output_bytes / rates.memory  # the last token's logits (llama-server asks for no others)
    hops = plan.rpc_devices * sum(p.rpc_hop_ms / 1000 + min(ub, tokens - s) * shape.embedding * 4 / fabric
                                  for s in starts)
    return PromptTime(tokens, ub, weights, attention, hops)


def _attention_s(c: Cluster, tier: RpcTier, shape: Shape, start: int, u: int, flash: bool, rates: Rates) -> float:
    """One block's attention for the ubatch of u tokens after `start` cached ones."""
    n_kv = kv_cells(start + u)
    width = shape.heads * shape.head_dim
    if not flash:
        scores = shape.heads * n_kv * u
        return scores * c.planner.prompt_scores_bytes / rates.memory + 4 * width * n_kv * u / rates.gemm
    cells = shape.kv_heads * shape.head_dim * n_kv  # a quantized K or V is copied to F16 for the kernel first
    convert = sum(row_size(t, cells) + 2 * cells for t in (tier.cache_type_k, tier.cache_type_v)
                  if t in QUANTIZED_CACHE_TYPES)
    return convert / rates.memory + 4 * width * (start + u / 2) * u / rates.flash


def prompt_lengths(tier: RpcTier) -> list[int]:
    """The prompt lengths shown for a tier: PROMPT_LENGTHS up to its context, and its whole context (less a turn's
    room for the answer: 64 tokens)."""
    full = tier.ctx_size - 64
    return [n for n in PROMPT_LENGTHS if n < full] + [full]


def prompt_estimate(c: Cluster, tier: Tier, plan: TierPlan) -> PromptTime | None:
    """The plan's prompt estimate: a prompt that fills an RPC tier's context (None for a router tier, or a device
    without a declared speed)."""
    return prompt_time(c, tier, prompt_lengths(tier)[-1], plan=plan) if tier.workers else None
