"""The planner's prompt estimate (planner/prompt.py): its worked example, its shape, and the full-size rehearsal it
was fitted to, held to issue 48's targets."""

from __future__ import annotations

import json

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import decode_copies, kv_cells, plan_rpc_tier
from clusterbook.pure.planner.prompt import prompt_lengths, prompt_time
from clusterbook.pure.planner.shape import block_params, from_declared
from clusterbook.pure.rehearsed import on_card

from ..conftest import ROOT

H200 = {"bandwidth_gbs": 4800, "tflops": 989}  # the device's card: NVIDIA's H200 figures (dense FP16)


def with_settings(c, **settings):
    tier = c.tier("reasoning")
    return tier.model_copy(update={**settings, "batch_size": settings.get("ubatch_size", tier.ubatch_size)})


def test_one_ubatch_by_hand(beefcake2):
    """1,024 tokens, one ubatch, flash attention on (the file's settings): per device the weights' products at 60 %
    of 130 TFLOP/s, each weight dequantized (read, F16 written, read again) at 52 % of 1,134 GB/s, the head's output
    read once; the attention's product over the causal half at 31 %, K's F16 copy; one hop of 1,024 x 8,192 F32."""
    tier = beefcake2.tier("reasoning")
    plan = plan_tier(beefcake2, tier)
    shape = from_declared(beefcake2.model(tier.model))
    gemm, flash, memory = 130e12 * 0.60, 130e12 * 0.31, 1134e9 * 0.52
    per_block = block_params(64, 8, 128, 8192, 29568)
    weights = sum(2 * d.blocks * per_block * 1024 / gemm + (d.weights + 4 * d.blocks * per_block) / memory
                  for d in plan.devices) + shape.output_bytes / memory
    cells = 8 * 128 * kv_cells(1024)
    attention = 80 * ((cells * 18 // 32 + 2 * cells) / memory + 4 * 64 * 128 * 512 * 1024 / flash)
    hop = 0.35e-3 + 1024 * 8192 * 4 / 12.5e9  # rpc_hop_ms (D36)
    t = prompt_time(beefcake2, tier, 1024, plan=plan)
    assert (t.ubatch, t.tokens) == (1024, 1024)
    assert t.weights_s == pytest.approx(weights, rel=1e-9)
    assert t.attention_s == pytest.approx(attention, rel=1e-9)
    assert t.hops_s == pytest.approx(hop, rel=1e-9)


@pytest.mark.parametrize("settings, faster", [
    ({"ubatch_size": 512}, {"ubatch_size": 1024}),  # a wider ubatch dequantizes the weights less often (cuBLAS)
    ({"flash_attn": "off", "ubatch_size": 256}, {"flash_attn": "on", "ubatch_size": 256}),  # no scores in memory
    ({"flash_attn": "off", "ubatch_size": 256}, {}),  # D30 against D26: at least 1.3 times as fast (issue 48)
])
def test_what_the_prompt_path_depends_on(beefcake2, settings, faster):
    slow = prompt_time(beefcake2, with_settings(beefcake2, **settings), 32704).seconds
    fast = prompt_time(beefcake2, with_settings(beefcake2, **faster), 32704).seconds
    assert fast < slow
    if not faster:
        assert slow / fast >= 1.3


def test_without_flash_attention_the_scores_grow_with_the_square_of_the_prompt(beefcake2):
    tier = with_settings(beefcake2, flash_attn="off", ubatch_size=256)
    short, long = (prompt_time(beefcake2, tier, n) for n in (8192, 32704))
    assert long.weights_s == pytest.approx(4 * short.weights_s, rel=0.01)  # linear
    assert long.attention_s > 14 * short.attention_s  # quadratic


def test_the_lengths_shown_stop_at_the_context(beefcake2):
    assert prompt_lengths(beefcake2.tier("reasoning")) == [8192, 16384, 32704]
    lab = load_cluster(ROOT / "lab/cluster.yaml")
    assert prompt_lengths(lab.tier("reasoning")) == [lab.tier("reasoning").ctx_size - 64]


def test_no_estimate_without_a_declared_speed(beefcake2):
    bare = on_card(beefcake2, tflops=None)
    assert prompt_time(bare, bare.tier("reasoning"), 1024) is None
    lab = load_cluster(ROOT / "lab/cluster.yaml")  # CPUs: their declared GFLOP/s and bandwidth
    assert prompt_time(lab, lab.tier("reasoning"), 512).seconds > 0


def test_flash_attention_decode_reads_an_f16_copy_of_a_quantized_cache(beefcake2):
    tier = beefcake2.tier("reasoning")
    plan = plan_rpc_tier(beefcake2, tier)
    worker = plan.devices[0]
    shape = from_declared(beefcake2.model(tier.model))
    assert decode_copies(tier, shape, worker) == worker.blocks * 2 * 8 * 128 * 2 * kv_cells(32768)  # K only
    assert decode_copies(with_settings(beefcake2, flash_attn="off"), shape, worker) == 0
    assert plan.decode_bound_full_ctx_tps < plan_rpc_tier(beefcake2, with_settings(
        beefcake2, flash_attn="off")).decode_bound_full_ctx_tps


def test_the_full_size_prompts_are_the_plan_within_25_percent_at_32k():
    """Issue 48's targets on the committed run (one H200, head and worker sharing it, each held to a V100S's
    memory, cuBLAS prompt path): every 32K prompt within 25 % of the planner for that card and every shorter one
    within 30 %; the 2 x H200 runs (a GPU each, as on beefcake2) within 5 %; and the file's settings (D30) read
    the 32K prompt at least 1.3 times as fast as D26's, measured."""
    c = on_card(load_cluster(ROOT / "cluster.yaml"), **H200)
    runs = json.loads((ROOT / "benchmarks/results/h200-prompt-times/full-size.json").read_text())
    measured = {}
    for run in runs:
        tier = with_settings(c, flash_attn=run["flash_attn"], ubatch_size=run["ubatch"])
        for p in run["prompts"]:
            planned = prompt_time(c, tier, p["prompt_tokens"]).seconds
            ratio = p["prompt_s"] / planned
            assert abs(ratio - 1) <= (0.25 if p["prompt_tokens"] > 32000 else 0.30), (run["name"], p, planned)
            measured[run["name"], p["prompt_tokens"]] = p["prompt_s"]
    assert measured["as_file", 32704] / measured["fa1024", 32704] >= 1.3
    two = ROOT / "benchmarks/results/h200x2-full-size"
    for run in (r for name in ("ub256.json", "fa128k-and-one-gpu.json")
                for r in json.loads((two / name).read_text()) if "full" in r):
        tier = with_settings(c, flash_attn=run["flash_attn"], ubatch_size=run["ubatch"], ctx_size=run["ctx"],
                             cache_type_k=run["cache"][0], cache_type_v=run["cache"][1])
        planned = prompt_time(c, tier, run["full"]["prompt_tokens"]).seconds
        assert run["full"]["prompt_s"] == pytest.approx(planned, rel=0.05), run["name"]


def test_the_api_page_puts_the_estimate_beside_the_rehearsal_with_the_tiers_settings(beefcake2):
    """beefcake2's rows: the plan on its V100S, the rehearsed prompt with the file's settings (D30), the plan for
    the H200 it ran on; D26's rehearsed prompts (other settings) are the capacity page's. The lab: the plan alone."""
    from clusterbook.pure.kinds import plan_cluster
    from clusterbook.pure.pages.apipage import prompt_section

    tier = beefcake2.tier("reasoning")
    page = prompt_section(beefcake2, tier, plan_cluster(beefcake2)["reasoning"])
    planned = prompt_time(beefcake2, tier, 32704).seconds
    assert f"| 32,704 | {planned:,.1f} s | 20.6 s | 16.7 s | 1.24 |" in page
    assert "54.3 s" not in page  # D26's 32K prompt: flash attention off
    lab = load_cluster(ROOT / "lab/cluster.yaml")
    page = prompt_section(lab, lab.tier("reasoning"), plan_cluster(lab)["reasoning"])
    assert "| prompt (tokens) | planned on its CPUs |\n" in page and "rehearsed" not in page.split("Planned:")[0]
