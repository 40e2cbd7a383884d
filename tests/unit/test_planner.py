"""The capacity plan matches hand-checked arithmetic, and refuses what cannot work."""

import json
from pathlib import Path

import pytest

from clusterbook.effects.lab.models import TinyModel, write_model
from clusterbook.model.loader import load_cluster
from clusterbook.pure import kinds
from clusterbook.pure.kinds import plan_cluster, plan_tier
from clusterbook.pure.planner.capacity import GIB, compute_bytes, kv_bytes_per_layer, row_size, rpc_device_plans
from clusterbook.pure.planner.findings import evaluate_claim, plan_findings
from clusterbook.pure.planner.loadtime import predict_load
from clusterbook.pure.planner.shape import from_declared, from_gguf
from tests.conftest import whole_text
from tests.inprocess import run_invoke

from ..conftest import seeds_placement

ROOT = Path(__file__).resolve().parents[2]

# OR1-Behemoth (beefcake2's reasoning model), worked by hand:
#   block params  = 8192*64*128*2 (q, o) + 8192*8*128*2 (k, v) + 3*8192*29568 (ffn) = 877,658,112
#   embedding     = 151,936 * 8192 = 1,244,659,712 (token_embd and output alike)
#   total params  = 80 * 877,658,112 + 2 * 1,244,659,712 = 72,701,968,384
#   bytes/param   = 47,369,119,648 / 72,701,968,384
BLOCK_PARAMS, EMBED_PARAMS, TOTAL_PARAMS = 877_658_112, 1_244_659_712, 72_701_968_384
BPP = 47_369_119_648 / TOTAL_PARAMS


def test_row_sizes_are_llama_cpp_s():
    assert row_size("f16", 32) == 64
    assert row_size("q8_0", 32) == 34
    assert row_size("q4_0", 32) == 18


def test_declared_shape_splits_the_file_by_parameters(beefcake2):
    shape = from_declared(beefcake2.model("OR1-Behemoth"))
    assert 80 * BLOCK_PARAMS + 2 * EMBED_PARAMS == TOTAL_PARAMS
    assert shape.block_bytes[0] == round(BLOCK_PARAMS * BPP)
    assert shape.embed_bytes == round(EMBED_PARAMS * BPP)
    assert abs(shape.total_bytes - 47_369_119_648) < 100


@pytest.mark.parametrize("ctx, kv_layer", [
    # K q4_0: 8 kv heads * 128 * ctx elements * 18/32 B; V f16: same elements * 2 B
    (4096, 8 * 128 * 4096 * 18 // 32 + 8 * 128 * 4096 * 2),       # 2,359,296 + 8,388,608 = 10,747,904
    (131072, 8 * 128 * 131072 * 18 // 32 + 8 * 128 * 131072 * 2),  # 75,497,472 + 268,435,456 = 343,932,928
])
def test_reasoning_tier_worked_example(beefcake2_seeds, ctx, kv_layer):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18), with D26's prompt settings
    tier = beefcake2.tier("reasoning").model_copy(update={"ctx_size": ctx, "flash_attn": "off", "ubatch_size": 256,
                                                          "batch_size": 256})
    shape = from_declared(beefcake2.model("OR1-Behemoth"))
    assert kv_bytes_per_layer(shape, ctx, "q4_0", "f16") == kv_layer
    plan = plan_tier(beefcake2, tier)
    # llama.cpp's split of 80 blocks + output over (RPC0, RPC1, CUDA0) with shares 27, 27, 26
    assert [(d.device, d.node, d.blocks, d.output) for d in plan.devices] == [
        ("RPC0", "vasp-02", 28, False), ("RPC1", "vasp-03", 27, False), ("CUDA0", "vasp-01", 25, True)]
    rpc0, _, head = plan.devices
    assert rpc0.weights == 28 * round(BLOCK_PARAMS * BPP)
    assert head.weights == 25 * round(BLOCK_PARAMS * BPP) + round(EMBED_PARAMS * BPP)
    assert rpc0.kv == 28 * kv_layer
    ub = tier.ubatch_size  # 256
    # no flash attention: a block's attention keeps 68 embedding-wide F32 values per ubatch token, and per KV cell
    # the F32 scores of every head and 16 bytes of mask per ubatch token; its FFN part 32 B per FFN element and 20 B
    # per embedding element per token; the larger of the two (the FFN's at 4K)
    # per embedding element; a worker that hands the stream on to the next device's blocks 36 more (HAND_ON_PER_EMBD)
    attention = ub * 68 * 8192 + ctx * ub * (4 * 64 + 16)
    assert rpc0.compute == max(attention + ub * 36 * 8192, ub * (32 * 29568 + 20 * 8192))
    assert head.compute == max(attention, ub * (32 * 29568 + 20 * 8192)) + 151_936 * 4  # one logits row
    # CUDA's pool: the F16 copy of the scores, or the F16 ffn weights cuBLAS multiplies (a V100S has no int8
    # tensor cores), whichever is larger, and 112 MiB of slack
    assert rpc0.pool == max(ub * ctx * 64 * 2, 8192 * 29568 * 2 + ub * 29568 * 2) + 112 * 2**20
    assert rpc0.overhead == 600 * 2**20
    assert rpc0.capacity == int(32768 * 2**20 * 0.95)
    assert plan.fits == (ctx == 4096)
    assert round(rpc0.total / GIB, 2) == (16.82 if ctx == 4096 else 37.28)  # over the 30.4 GiB usable on a V100S


def test_the_plan_is_the_full_size_rehearsal_within_5_percent():
    """beefcake2's tier at full size, each GPU held to a V100S (benchmarks/device/full_size.py): every device's peak
    through a full prompt within 5 % of its plan, and each graph buffer and pool of the 2-block sweep within 10 %."""
    results = ROOT / "benchmarks/results/h200x2-full-size"
    full = json.loads((results / "ub256.json").read_text())[0]
    plan = {d["device"]: d for d in full["plan"]}
    assert full["peak_mib"]["rpc-vasp-03"] / 1024 == pytest.approx(plan["RPC0"]["total_gib"], rel=0.05)
    assert full["peak_mib"]["head"] / 1024 == pytest.approx(plan["CUDA0"]["total_gib"], rel=0.05)
    beefcake2 = two_blocks(load_cluster(ROOT / "cluster.yaml"))
    shape = from_declared(beefcake2.model("OR1-Behemoth"))
    for run in json.loads((results / "sweep.json").read_text()):
        tier = beefcake2.tier("reasoning").model_copy(update={
            "ctx_size": run["ctx"], "flash_attn": run["flash_attn"], "ubatch_size": run["ubatch"],
            "batch_size": run["ubatch"], "cache_type_k": run["cache"][0], "cache_type_v": run["cache"][1]})
        worker = next(d for d in rpc_device_plans(beefcake2, tier, shape, tier.ctx_size) if d.device == "RPC0")
        measured_pool = (run["peak_mib"]["rpc-vasp-03"] - run["idle_mib"]["rpc-vasp-03"]) * 2**20
        assert run["buffers"]["head"]["RPC0"]["compute"] * 2**20 == pytest.approx(worker.compute, rel=0.10), run["name"]
        assert measured_pool == pytest.approx(worker.pool, rel=0.10), run["name"]


@pytest.mark.parametrize("ctx", [32768, 62208])
def test_the_plan_is_the_full_size_run_at_the_files_settings_within_2_percent(ctx):
    """Issue 66 row 6: the file's settings (flash attention, K q4_0 and V f16, ubatch 1024) at full size on one H200,
    each process held to a V100S (benchmarks/results/h200-full-size-contexts, 2026-12-05): every device's peak
    through a prompt that fills the context within 2 % of today's plan. The run's weights, KV cache, pool and
    overhead come from the model file's header (the plan it printed), the graph buffer from today's planner (it
    depends on the widths alone): the worker beside the head holds 36 bytes per embedding element and ubatch token
    more, and a q4_0 K beside an F16 V is read as it is (no F16 copy), which the plan before missed by 0.2 GiB."""
    results = ROOT / "benchmarks/results/h200-full-size-contexts"
    run = next(r for r in json.loads((results / "full-size.json").read_text()) if r["ctx"] == ctx)
    beefcake2 = load_cluster(ROOT / "cluster.yaml")
    tier = beefcake2.tier("reasoning").model_copy(update={"ctx_size": ctx})
    shape = from_declared(beefcake2.model("OR1-Behemoth"))
    plans = {d.device: d for d in rpc_device_plans(beefcake2, tier, shape, ctx)}
    for device, process in (("RPC0", "rpc-vasp-03"), ("CUDA0", "head")):
        printed = next(d for d in run["plan"] if d["device"] == device)
        total = (printed["weights_gib"] + printed["kv_gib"] + printed["pool_gib"] + printed["overhead_gib"]) * GIB \
            + plans[device].compute
        assert run["peak_mib"][process] * 2**20 == pytest.approx(total, rel=0.02), (device, ctx)
    worker = run["buffers"]["head"]["RPC0"]["compute"] * 2**20
    assert worker == pytest.approx(plans["RPC0"].compute, rel=0.03)


@pytest.mark.parametrize("ctx", [32768, 61184])
def test_at_the_largest_context_the_plan_offers_the_peak_is_the_plan_and_under_the_usable_capacity(ctx):
    """Issue 66 row 6, measured again with today's planner (benchmarks/results/h100-full-size-contexts, one H100,
    2026-12-06, head and worker sharing it, each held to a V100S): at the file's context and at the largest the plan
    offers for the model file's own header (61,184; the file's declared shape gives 60,672), every process's peak
    through a prompt that fills the context is within 2 % of the plan and never above its usable capacity."""
    results = ROOT / "benchmarks/results/h100-full-size-contexts"
    run = next(r for r in json.loads((results / "full-size.json").read_text()) if r["ctx"] == ctx)
    assert not any(run["oom"].values())
    for device, process in (("RPC0", "rpc-vasp-03"), ("CUDA0", "head")):
        planned = next(d for d in run["plan"] if d["device"] == device)
        peak = run["peak_mib"][process] * 2**20
        assert peak == pytest.approx(planned["total_gib"] * GIB, rel=0.02), (device, ctx)
        assert peak <= planned["capacity_gib"] * GIB, (device, ctx, peak / GIB)


def test_the_load_and_recovery_are_the_full_size_rehearsal_within_25_percent():
    """Issue 43's targets, held to the committed run: the load within 25 % of the prediction, a worker crash back
    within 25 % and 30 s; the 128K flash-attention run (the plan's reach) within 5 % of its plan, no out-of-memory;
    and the flag that made the difference: --load-mode mlock took 2.4 times as long as mmap+mlock."""
    results = ROOT / "benchmarks/results/h200x2-full-size"
    runs = {r["name"]: r for r in json.loads((results / "load-modes.json").read_text())}
    beefcake2 = load_cluster(ROOT / "cluster.yaml")
    tier = beefcake2.tier("reasoning")
    load = predict_load(beefcake2, tier, plan_tier(beefcake2, tier))
    rendered = runs["mmlock"]
    assert rendered["load_s"] == pytest.approx(load.load_s, rel=0.25)
    assert rendered["recovery"]["healthy_s"] == pytest.approx(load.recovery_s, rel=0.25)
    assert rendered["recovery"]["healthy_s"] <= 30
    assert "mmap+mlock" in kinds.server_argv(beefcake2, tier)
    assert runs["mlock"]["load_s"] > 2 * rendered["load_s"]
    fa = next(r for r in json.loads((results / "fa128k-and-one-gpu.json").read_text()) if r["name"] == "fa128k")
    plan = {d["device"]: d for d in fa["plan"]}
    assert fa["ctx"] == 131072 and fa["full"]["prompt_tokens"] > 0.99 * 131072 and not any(fa["oom"].values())
    assert fa["peak_mib"]["rpc-vasp-03"] / 1024 == pytest.approx(plan["RPC0"]["total_gib"], rel=0.05)
    assert fa["peak_mib"]["head"] / 1024 == pytest.approx(plan["CUDA0"]["total_gib"], rel=0.05)


def two_blocks(c):
    """beefcake2 with OR1-Behemoth's widths in 2 blocks (make_shaped_model.py --layers 2): the sweep's model."""
    model = c.model("OR1-Behemoth")
    small = model.model_copy(update={"architecture": model.architecture.model_copy(update={"layers": 2})})
    return c.model_copy(update={"models": [small if m.id == model.id else m for m in c.models]})


def test_decode_bound_is_bandwidth_over_bytes_read(beefcake2_seeds):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    plan = plan_tier(beefcake2, beefcake2.tier("reasoning"))
    read = 47_369_119_648 - round(EMBED_PARAMS * BPP)  # every weight but the embedding table, once per token
    hops = 2 * (0.35e-3 + 2 * 8192 * 4 / 12.5e9)  # two RPC devices at the measured hop (D36); 100 Gb/s fabric
    assert beefcake2.planner.rpc_hop_ms == 0.35
    assert plan.decode_bound_tps == pytest.approx(1 / (read / 1134e9 + hops), rel=1e-6)
    assert round(plan.decode_bound_tps, 1) == 23.9


def test_q8_claim_is_refuted(beefcake2_seeds):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    decision = next(d for d in beefcake2.decisions if d.id == "D01")
    verdict = evaluate_claim(beefcake2, decision.claims[0], {})
    assert verdict.refuted and round(verdict.computed, 1) == 14.8


@pytest.mark.parametrize("decision, computed", [("D05", 713.0), ("D13", 15.7), ("D08", 89344)])
def test_seed_claims_are_computed(beefcake2_seeds, decision, computed):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    d = next(d for d in beefcake2.decisions if d.id == decision)
    verdict = evaluate_claim(beefcake2, d.claims[0], {})
    assert verdict.refuted
    assert verdict.computed == pytest.approx(computed, rel=0.01)


def test_production_plan_has_no_findings(beefcake2):
    assert plan_findings(beefcake2, plan_cluster(beefcake2)) == []


def test_tier_that_does_not_fit_names_device_and_shortfall(beefcake2_seeds):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    big = beefcake2.model_copy(update={"tiers": [t.model_copy(update={"ctx_size": 131072})
                                                 if t.name == "reasoning" else t for t in beefcake2.tiers]})
    findings = dict((m.split(":")[0], m) for _, m in plan_findings(big, plan_cluster(big)))
    message = next(m for m in findings.values() if "RPC0" in m)
    assert "tier reasoning does not fit RPC0 on vasp-02 (Tesla V100S-PCIE-32GB): needs 37.3 GiB of 30.4 GiB" in message
    assert "short by 6.9 GiB; the largest context that fits is 88832" in message


def test_target_above_bound_names_both_numbers(beefcake2_seeds):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    targets = [t.model_copy(update={"decode_tps": t.decode_tps.model_copy(update={"target": 30})})
               if t.tier == "reasoning" else t for t in beefcake2.targets]
    fast = beefcake2.model_copy(update={"targets": targets})
    messages = [m for _, m in plan_findings(fast, plan_cluster(fast))]
    assert "30 tok/s is above the decode bound of 23.9 tok/s for OR1-Behemoth on tier reasoning's hardware" in messages


def test_check_cli_fails_an_unfitting_cluster_with_its_line(tmp_path):
    text = seeds_placement(whole_text()).replace("    ctx_size: 32768\n    cache_type_k",
                                                                        "    ctx_size: 131072\n    cache_type_k")
    f = tmp_path / "big.yaml"
    f.write_text(text)
    proc = run_invoke("check", "--cluster", str(f))
    assert proc.returncode == 2
    line = text.splitlines().index("    ctx_size: 131072") + 1
    assert f"{f}:{line}: tiers[reasoning].ctx_size: tier reasoning does not fit RPC0 on vasp-02" in proc.stderr


def test_gguf_header_gives_exact_tensor_sizes(tmp_path):
    model = TinyModel("t", layers=3, embedding=64, heads=4, kv_heads=2, feed_forward=128, seed=3)
    shape = from_gguf(write_model(model, tmp_path / "t.gguf"))
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab) == (3, 4, 2, 16, 259)
    # Q8_0: 34 bytes per 32 weights; norms are F32
    block = (64 * 64 * 2 + 32 * 64 * 2 + 3 * 64 * 128) * 34 // 32 + 2 * 64 * 4
    assert shape.block_bytes == (block,) * 3
    assert shape.embed_bytes == 259 * 64 * 34 // 32
    assert shape.output_bytes == 259 * 64 * 34 // 32 + 64 * 4
    assert compute_bytes(shape, 256, 32, False, False) > 0


def test_plan_json_is_complete(tmp_path):
    seeds = tmp_path / "cluster.yaml"  # the seeds' placement, where the two tiers exclude each other (D14)
    seeds.write_text(seeds_placement(whole_text()))
    proc = run_invoke("plan", "--json", "--tier", "reasoning", "--cluster", str(seeds))
    data = json.loads(proc.stdout)
    assert data["tiers"][0]["tier"] == "reasoning" and data["tiers"][0]["fits"] is True
    assert {"weights", "kv", "compute", "overhead", "total", "headroom"} <= set(data["tiers"][0]["devices"][0])
    assert data["cluster"]["exclusions"] == [{"tiers": ["fast", "reasoning"], "reason": "both need vasp-02's GPU "
                                              "(its only GPU; --gres=gpu:1 and gpu:1): one waits in the queue"}]


def test_the_reasoning_model_at_other_quantizations_is_planned_on_the_tiers_own_devices():
    """Seed 001's table of OR1-Behemoth files (Q4_K_S to Q8_0), computed: each planned as if the tier served it."""
    from clusterbook.pure.docpages import quantization_choice
    from clusterbook.pure.planner.variants import variants

    c = load_cluster(ROOT / "cluster.yaml")
    found = variants(c, c.tier("reasoning"))
    assert [v.quantization for v in found] == ["Q4_K_S", "Q4_K_M", "Q5_K_S", "Q6_K", "Q8_0"]  # smallest first
    assert [v.served for v in found].count(True) == 1 and found[1].served
    assert [v.plan.fits for v in found] == [True, True, True, False, False]  # Q5_K_S too, with flash attention
    bounds = [v.plan.decode_bound_tps for v in found]
    assert bounds == sorted(bounds, reverse=True)  # more bytes per token, a lower bound
    page = quantization_choice(c, c.tier("reasoning"))
    assert "`OR1-Behemoth-Q4_K_S` fits with the most room here" in page
    lab = load_cluster(ROOT / "lab/cluster.yaml")
    assert quantization_choice(lab, lab.tier("reasoning")) == ""  # one file: no table


def test_the_prerequisites_say_what_each_node_needs_and_what_the_file_does_not_say():
    from clusterbook.pure.docpages import prerequisites

    page = prerequisites(load_cluster(ROOT / "cluster.yaml"))
    # how vasp-01 is reached, from access
    assert "`ssh -o ConnectTimeout=10 -J root@100.127.208.104 root@10.0.0.31`" in page
    assert "rocky 8\\.10, gcc\\-toolset\\-12" in page and "535\\.183\\.01" in page and "MTU 2044" in page
    assert "`/cluster/shared` mounted on every node" in page
    assert "| slurm-ctl |" in page and "assumed: the file does not say" in page  # slurm-ctl declares no OS
    assert page.count("assumed") == 1
