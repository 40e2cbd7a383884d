"""Per-device memory (weights, KV cache, compute buffers, overhead), the largest context, and the decode bound."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from clusterbook.model.schema import FLASH_ATTN_MIN_CC, Cluster, RpcTier, Tier
from clusterbook.model.schema import QUANTIZED_CACHE_TYPES as QUANTIZED_TYPES
from clusterbook.pure import topology as topo
from clusterbook.pure.layersplit import CPU, place_layers
from clusterbook.pure.planner.shape import Shape, from_declared

GIB = 2**30
KV_PAD = 256  # llama.cpp pads the KV cache to a multiple of 256 cells
# llama.cpp row sizes: bytes per block of 32 elements (or per element for float types)
ROW_BYTES = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32), "q4_1": (20, 32),
             "iq4_nl": (18, 32), "q5_0": (22, 32), "q5_1": (24, 32)}


def row_size(cache_type: str, elements: int) -> int:
    size, block = ROW_BYTES[cache_type]
    return elements * size // block


def kv_cells(ctx: int) -> int:
    return -(-ctx // KV_PAD) * KV_PAD


def kv_bytes_per_layer(shape: Shape, ctx: int, type_k: str, type_v: str) -> int:
    elements = shape.kv_heads * shape.head_dim * kv_cells(ctx)
    return row_size(type_k, elements) + row_size(type_v, elements)


# Measured at full size (benchmarks/results/h200x2-full-size: OR1-Behemoth's widths, b11434, CUDA; and the same
# graph on the lab's CPUs): llama.cpp reserves each device's graph buffer for a full context when it starts. Its
# largest moment is either a block's attention or its feed-forward part; per ubatch token the attention keeps 68
# embedding-wide F32 values around it and the feed-forward 8 F32 values of its width and 5 of the embedding's
# (fitted: 272.3 and 541.6 MiB at ubatch 512 on 8192 x 29568; planned 272.0 and 542.0).
ATTENTION_BASE_PER_EMBD = 68
FFN_PER_FF, FFN_PER_EMBD = 32, 20
HAND_ON_PER_EMBD = 36  # bytes per embedding unit and ubatch token more in the graph buffer of a device whose blocks
# hand the residual stream on to another device's blocks: the worker beside the head, 72 / 144 / 288 MiB more than
# the head at ubatch 256 / 512 / 1024 (full-size runs of 2026-11-28 and 2026-12-05); none where only the output
# layer follows (the 2-block sweep)
POOL_SLACK = 112 * 2**20  # what CUDA's pool held beyond its largest temporary buffer: 76-107 MiB measured


def compute_bytes(shape: Shape, ctx: int, ubatch: int, flash_attn: bool, output: bool, kv_copies: int = 0,
                  parallel: int = 1, cuda: bool = True, hands_on: bool = False) -> int:
    """Largest graph buffer of one device that holds blocks, reserved for a full context at start. On a CUDA device,
    per KV cell and ubatch token: without flash attention the F32 scores of every head plus 16 bytes of mask; with it
    8 bytes of mask, plus kv_copies bytes per cell for the F16 copies of a quantized K and V that CUDA's kernels read
    (prompt_kv_copies); the output device adds one logits row per slot (llama-server computes logits for a prompt's
    last token only); a device whose blocks hand on to another's holds HAND_ON_PER_EMBD more in its attention. A CPU
    device's graph is cpu_compute_bytes."""
    if not cuda:
        return cpu_compute_bytes(shape, ctx, ubatch, flash_attn, output)
    n_kv = kv_cells(ctx)
    per_cell = ubatch * 8 + kv_copies if flash_attn else ubatch * (4 * shape.heads + 16)
    base = ATTENTION_BASE_PER_EMBD + (HAND_ON_PER_EMBD if hands_on else 0)
    attention = ubatch * base * shape.embedding + n_kv * per_cell
    ffn = ubatch * (FFN_PER_FF * shape.feed_forward + FFN_PER_EMBD * shape.embedding)
    logits = parallel * shape.vocab * 4 if output else 0
    return max(attention, ffn) + logits


def cpu_compute_bytes(shape: Shape, ctx: int, ubatch: int, flash_attn: bool, output: bool) -> int:
    """The CPU backend's graph buffer (the lab's tiers: within 10 % of llama.cpp's report, test_planner_accuracy):
    attention or FFN of a block, whichever is larger, plus the output's logits."""
    n_kv = kv_cells(ctx)
    activations = ubatch * shape.embedding * 4 * 4
    if flash_attn:
        attention = ubatch * n_kv * 2 + activations  # F16 mask; scores stay in the kernel
    else:
        attention = ubatch * n_kv * shape.heads * 4 + ubatch * n_kv * 4 + activations  # F32 KQ and mask
    ffn = ubatch * shape.feed_forward * 4 * 3 + activations
    logits = ubatch * (shape.vocab + shape.embedding) * 4 if output else 0
    return max(attention, ffn) + logits


def kv_f16_copies(shape: Shape, type_k: str, type_v: str, cuda: bool) -> int:
    """Bytes per KV cell of the F16 copies CUDA's flash-attention kernels make of a quantized K and V for prompt
    batches (ggml-cuda fattn.cu: the tile and MMA kernels read F16; the copies sit in the graph buffer)."""
    if not cuda:
        return 0
    return sum(shape.kv_heads * shape.head_dim * 2 for t in (type_k, type_v) if t in QUANTIZED_TYPES)


def prompt_kv_copies(shape: Shape, type_k: str, type_v: str, cuda: bool) -> int:
    """Bytes per KV cell in a prompt's graph buffer for the F16 copies of the KV cache: both K and V where both are
    quantized (kv_f16_copies: the 128K run, K and V q4_0); none where V is F16 and K quantized (the kernel reads that
    K as it is: at 32K and 62K, ubatch 1024, the graph buffer grew by the mask alone, 2026-12-05)."""
    if type_k in QUANTIZED_TYPES and type_v in QUANTIZED_TYPES:
        return kv_f16_copies(shape, type_k, type_v, cuda)
    return 0


def pool_bytes(shape: Shape, ctx: int, ubatch: int, flash_attn: bool, cublas_prompt: bool) -> int:
    """The high-water mark of CUDA's memory pool through a prompt that fills the context (it grows during the prompt,
    after the server has started): without flash attention the F16 copy of every head's attention scores for the
    product with the F16 V cache (on any card); where prompt batches go through cuBLAS (cards without int8 tensor
    cores, such as the V100S) the largest weight matrix dequantized to F16 with its input. Measured: 2,124 MiB at
    32K and ubatch 512 without flash attention, 598 MiB with it, on the forced cuBLAS path."""
    terms = []
    if not flash_attn:
        terms.append(ubatch * kv_cells(ctx) * shape.heads * 2)
    if cublas_prompt:
        widest = max(shape.feed_forward, shape.heads * shape.head_dim)
        terms.append(shape.embedding * widest * 2 + ubatch * widest * 2)
    return max(terms) + POOL_SLACK if terms else 0


@dataclass(frozen=True)
class DevicePlan:
    """Memory and traffic of one device of a tier."""

    device: str
    node: str
    gpu: str | None
    blocks: int
    output: bool
    weights: int
    kv: int
    compute: int
    overhead: int
    pool: int  # CUDA's pool at its high-water mark through a full prompt (0 for a CPU)
    capacity: int | None  # usable bytes (after headroom); None for a host CPU (RAM is not planned here)
    bandwidth_gbs: float | None

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.pool + self.overhead

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.total

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.total <= self.capacity


@dataclass(frozen=True)
class FlashOffer:
    """The largest context an RPC tier reaches with flash attention on and its K and V cache quantized."""

    ctx: int
    cache_type_k: str
    cache_type_v: str


@dataclass(frozen=True)
class TierPlan:
    """The plan of one tier at its configured context."""

    tier: str
    model: str
    ctx: int
    shape_source: str
    devices: list[DevicePlan]
    max_ctx: int | None
    decode_bound_tps: float | None
    decode_bound_full_ctx_tps: float | None
    rpc_devices: int
    notes: list[str] = field(default_factory=list)
    flash: FlashOffer | None = None  # what flash attention would allow, where it is off on cards that have it

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)


def _capacity(c: Cluster, memory_bytes: int | None) -> int | None:
    if memory_bytes is None:
        return None
    return int(memory_bytes * (1 - c.planner.headroom_pct / 100))


def rpc_device_plans(c: Cluster, tier: RpcTier, shape: Shape, ctx: int) -> list[DevicePlan]:
    kv_layer = kv_bytes_per_layer(shape, ctx, tier.cache_type_k, tier.cache_type_v)
    flash = tier.flash_attn == "on"
    place = topo.placement(c, tier)
    offload = topo.offload_devices(c, tier)
    plans = []
    for dev in topo.tier_devices(c, tier):
        idx = CPU if dev.name == "CPU" else offload.index(dev)
        blocks = [i for i, d in enumerate(place.blocks) if d == idx]
        output = place.output == idx
        weights = sum(shape.block_bytes[i] for i in blocks) + (shape.output_bytes if output else 0)
        if dev.name == "CPU":
            weights += shape.embed_bytes  # llama.cpp keeps the token embedding on the host CPU
        overhead = c.planner.device_overhead_mib * 2**20 if dev.gpu else 0
        node = c.node(dev.node)
        busy = bool(blocks or output)
        copies = prompt_kv_copies(shape, tier.cache_type_k, tier.cache_type_v, dev.gpu is not None)
        hands_on = bool(blocks) and idx != CPU and max(blocks) < len(place.blocks) - 1 and dev.gpu is not None
        plans.append(DevicePlan(
            dev.name, dev.node, dev.gpu.model if dev.gpu else None, len(blocks), output, weights,
            kv_layer * len(blocks),
            compute_bytes(shape, ctx, tier.ubatch_size, flash, output, copies, tier.parallel, dev.gpu is not None,
                          hands_on) if busy else 0,
            overhead, pool_bytes(shape, ctx, tier.ubatch_size, flash, dev.gpu.prompt_via_cublas)
            if busy and dev.gpu else 0, _capacity(c, dev.memory_bytes),
            dev.gpu.bandwidth_gbs if dev.gpu else node.cpu_bandwidth_gbs))
    return plans


def decode_seconds(c: Cluster, devices: list[DevicePlan], shape: Shape, rpc_devices: int,
                   extra_read: dict[str, int] | None = None) -> float | None:
    """Seconds per token: every device reads its weights once, plus one hop per RPC device."""
    seconds = 0.0
    for d in devices:
        read = d.weights + (extra_read or {}).get(d.device, 0)
        if read == 0:
            continue
        if not d.bandwidth_gbs:
            return None
        seconds += read / (d.bandwidth_gbs * 1e9)
    fabric = c.networks[c.rpc_network].bandwidth_gbps * 1e9 / 8
    hop = c.planner.rpc_hop_ms / 1000 + 2 * shape.embedding * 4 / fabric
    return seconds + rpc_devices * hop


def plan_rpc_tier(c: Cluster, tier: RpcTier, shape: Shape | None = None) -> TierPlan:
    model = c.model(tier.model)
    shape = shape or from_declared(model)
    devices = rpc_device_plans(c, tier, shape, tier.ctx_size)
    rpc = sum(1 for d in topo.tier_devices(c, tier) if d.endpoint)
    bound = decode_seconds(c, devices, shape, rpc)
    full = decode_seconds(c, devices, shape, rpc, {d.device: d.kv + decode_copies(tier, shape, d) for d in devices})
    return TierPlan(tier.name, model.id, tier.ctx_size, shape.source, devices,
                    largest_context(c, tier, shape), 1 / bound if bound else None, 1 / full if full else None,
                    rpc, flash=flash_offer(c, tier, shape))


RPC_SPIN_MAX_US = 250_000  # no reader polls longer than this, whatever a token takes


def rpc_spin_us(c: Cluster, tier: Tier) -> int:
    """How long an RPC tier's head and workers poll for the next message before they sleep (GGML_RPC_SPIN_US, read
    by the engine patch that speeds up rpc_wait): twice the plan's time per token at the tier's full context, so a
    decoding side never sleeps; 0 without that patch, on a router tier, or where a device is a CPU (its poll would
    take a core from the computation)."""
    patched = c.engine.patched_for("rpc_wait")
    if not patched or not tier.workers or not all(d.gpu for d in topo.tier_devices(c, tier)):
        return 0
    full = plan_rpc_tier(c, tier).decode_bound_full_ctx_tps
    return min(RPC_SPIN_MAX_US, 1000 * math.ceil(2e3 / full)) if full else RPC_SPIN_MAX_US  # whole ms


def decode_copies(tier: RpcTier, shape: Shape, d: DevicePlan) -> int:
    """Bytes a CUDA device's flash attention moves per token beyond its KV cache at a full context: a quantized K or
    V is copied to F16 (written, then read) before each token's attention (ggml-cuda fattn-common.cuh)."""
    if tier.flash_attn != "on" or d.gpu is None:
        return 0
    return d.blocks * 2 * kv_f16_copies(shape, tier.cache_type_k, tier.cache_type_v, True) * kv_cells(tier.ctx_size)


FLASH_CACHE_TYPE = "q4_0"  # the most compact KV cache type llama.cpp's CUDA flash attention reads (seed 004's)


def flash_offer(c: Cluster, tier: RpcTier, shape: Shape) -> FlashOffer | None:
    """Where a tier's flash attention is off but every GPU of it has the kernels (compute capability 7.0 or more):
    the largest context that fits with it on and K and V at q4_0 (None where it is on already, or no context fits)."""
    gpus = [d.gpu for d in topo.tier_devices(c, tier) if d.gpu]
    if tier.flash_attn != "off" or not gpus or any(g.cc < FLASH_ATTN_MIN_CC for g in gpus):
        return None
    flashed = tier.model_copy(update={"flash_attn": "on", "cache_type_k": FLASH_CACHE_TYPE,
                                      "cache_type_v": FLASH_CACHE_TYPE})
    ctx = largest_context(c, flashed, shape)
    return FlashOffer(ctx, FLASH_CACHE_TYPE, FLASH_CACHE_TYPE) if ctx else None


def largest_context(c: Cluster, tier: RpcTier, shape: Shape) -> int | None:
    """Largest context (a multiple of 256, up to the trained context) at which every device fits."""
    def fits(ctx: int) -> bool:
        return all(d.fits for d in rpc_device_plans(c, tier, shape, ctx))
    lo, hi = 0, shape.context // KV_PAD
    if not fits(KV_PAD):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * KV_PAD):
            lo = mid
        else:
            hi = mid - 1
    return lo * KV_PAD


def plan_one_node(c: Cluster, tier: Tier, shapes: dict[str, Shape] | None = None, ubatch: int = 512) -> TierPlan:
    """A tier on one node (router mode, embeddings), at its worst: the models_max largest of its models resident at
    once, each split by layers over the node's GPUs as llama.cpp does by default (equal shares for equal GPUs; the
    output layer on the last one); ubatch: its physical batch (llama-server's default 512 in router mode)."""
    shapes = shapes or {}
    node = c.node(tier.head)
    models = sorted((c.model(m) for m in tier.served_models), key=lambda m: m.bytes, reverse=True)
    resident = models[: tier.models_max or len(models)]
    gpus = node.gpu_devices
    count = max(1, len(gpus))
    parts = [{"blocks": 0, "output": False, "weights": 0, "kv": 0, "compute": 0, "pool": 0} for _ in range(count)]
    for m in resident:
        s = shapes.get(m.id) or from_declared(m)
        place = place_layers(s.layers, topo.FULL_OFFLOAD, [1.0] * count, c.engine.build)
        kv_layer = kv_bytes_per_layer(s, tier.ctx_size, "f16", "f16")
        for i, part in enumerate(parts):  # device i: GPU i, or the node's CPU when it has no GPU
            blocks = [b for b, d in enumerate(place.blocks) if d == i]
            output = place.output == i
            part["blocks"] += len(blocks)
            part["output"] = part["output"] or output
            part["weights"] += sum(s.block_bytes[b] for b in blocks) + (s.output_bytes if output else 0)
            if not gpus:  # the token embedding stays in host memory: on a CPU-only node, the same RAM
                part["weights"] += s.embed_bytes
            part["kv"] += kv_layer * len(blocks)
            # children run llama.cpp's default --flash-attn auto: on for a CPU (measured in the lab); on a GPU
            # the larger no-flash buffer is planned, since auto's choice there depends on the card
            part["compute"] += compute_bytes(s, tier.ctx_size, ubatch, not gpus, output, cuda=bool(gpus)) \
                if blocks or output else 0
            part["pool"] += pool_bytes(s, tier.ctx_size, ubatch, False, gpus[i].prompt_via_cublas) \
                if gpus and (blocks or output) else 0
    devices = []
    for i, (gpu, part) in enumerate(zip(gpus or [None], parts)):
        devices.append(DevicePlan(
            f"CUDA{i}" if gpu else "CPU", node.name, gpu.model if gpu else None, part["blocks"], part["output"],
            part["weights"], part["kv"], part["compute"],
            c.planner.device_overhead_mib * 2**20 * len(resident) if gpu else 0, part["pool"],
            _capacity(c, gpu.memory_mib * 2**20 if gpu else None),
            gpu.bandwidth_gbs if gpu else node.cpu_bandwidth_gbs))
    biggest = shapes.get(models[0].id) or from_declared(models[0])
    single = [replace(devices[0], weights=biggest.total_bytes - biggest.embed_bytes)]
    bound = decode_seconds(c, single, biggest, 0)
    notes = [f"worst case: {len(resident)} model(s) resident ({', '.join(m.id for m in resident)})"]
    return TierPlan(tier.name, models[0].id, tier.ctx_size, "declared", devices, None,
                    1 / bound if bound else None, None, 0, notes)


def plan_json(plan: TierPlan) -> dict:
    """A plan as plain data, with the derived totals."""

    data = asdict(plan)
    data["fits"] = plan.fits
    for d, dev in zip(data["devices"], plan.devices):
        d.update(total=dev.total, headroom=dev.headroom, fits=dev.fits)
    return data
