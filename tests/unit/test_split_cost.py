"""The split-cost comparison: the tier's command lines without RPC, which models fit one device, the ratios."""

import pytest

from clusterbook.effects.rehearsal import head_argv, one_device_argv
from clusterbook.effects.splitcost import SplitCost, fits_one_device, markdown
from clusterbook.effects.tuning import llama_bench_argv
from clusterbook.pure import kinds
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.render.artifacts import server_exec


def test_one_device_argv_drops_exactly_the_rpc_workers_and_the_split(beefcake2):
    tier = beefcake2.tier("reasoning")
    argv = kinds.server_argv(beefcake2, tier)
    one = one_device_argv(argv)
    assert "--rpc" not in one and "--tensor-split" not in one
    removed = [a for a in argv if a not in one]
    assert removed == ["--rpc", argv[argv.index("--rpc") + 1], "--tensor-split", argv[argv.index("--tensor-split") + 1]]
    assert one[one.index("--flash-attn") + 1] == tier.flash_attn  # every other flag is kept as rendered


def test_rehearsed_head_is_the_units_line_without_numa_binding(beefcake2):
    tier = beefcake2.tier("reasoning")  # numa_bind: the unit starts the head under numactl
    unit = server_exec(beefcake2, tier)
    assert unit[0] == "/usr/bin/numactl"
    head = head_argv(beefcake2, tier)
    assert head == unit[unit.index(kinds.server_argv(beefcake2, tier)[0]):]
    assert head_argv(beefcake2, tier, one_device=True) == one_device_argv(head)


@pytest.mark.parametrize("cluster, tier, fits", [
    ("beefcake2", "reasoning", False),  # 72B Q4_K_M, about 44 GiB: no single V100S holds it
    ("ridge", "deep", True),            # 70B on an 80 GB A100 head: it does
])
def test_fits_one_device_follows_the_plan(request, cluster, tier, fits):
    c = request.getfixturevalue(cluster)
    t = c.tier(tier)
    assert fits_one_device(plan_tier(c, t), t.head) is fits


def test_llama_bench_on_one_device_has_no_split(beefcake2):
    tier = beefcake2.tier("reasoning")
    split = llama_bench_argv(beefcake2, tier, "off", "f16", "f16", "512", "512", prompt=0)
    one = llama_bench_argv(beefcake2, tier, "off", "f16", "f16", "512", "512", prompt=0, rpc=False)
    assert {"-rpc", "-ts", "-sm"} <= set(split) and not {"-rpc", "-ts", "-sm"} & set(one)
    assert one[one.index("-p") + 1] == "0" and one[one.index("-fa") + 1] == "off"


def test_ratios_and_report():
    cost = SplitCost(engine_tier=202.0, engine_one=240.0, served_tier=186.0, served_one=220.0)
    assert (cost.engine_ratio, cost.served_ratio, cost.served_vs_engine_one) == (0.842, 0.845, 0.775)
    text = markdown(cost, 2)
    assert "| llama-bench (tg128) | 202.0 | 240.0 | 84.2% |" in text
    assert "| llama-server over HTTP | 186.0 | 220.0 | 84.5% |" in text
    assert "against llama-bench on one device: 77.5%" in text


def test_a_model_too_big_for_one_device_reads_so():
    cost = SplitCost(engine_tier=20.0, engine_one=None, served_tier=18.0, served_one=None, tokens=32)
    assert cost.engine_ratio is None and cost.to_json()["served_ratio"] is None
    text = markdown(cost, 3)
    assert text.count("does not fit one device") == 2 and "against llama-bench" not in text
    assert "| llama-bench (tg32) | 20.0 |" in text


@pytest.mark.parametrize("quick,sizes", [(False, ["-r", "3", "-p", "512", "-n", "128"]),
                                         (True, ["-r", "1", "-p", "128", "-n", "32"])])
def test_the_tune_runs_every_llama_bench_at_its_size(beefcake2, monkeypatch, quick, sizes):
    """bench.tune --quick (the CPU rehearsal's test): the grid and the best point again, each one short run."""
    from clusterbook.effects import tuning
    runs = []

    def bench(c, argv, gpus):
        runs.append(argv)
        ub, b = (int(argv[argv.index(flag) + 1].split(",")[0]) for flag in ("-ub", "-b"))
        return [{"n_ubatch": ub, "n_batch": b, "flash_attn": argv[argv.index("-fa") + 1] == "on", "type_k": "f16",
                 "type_v": "f16", "n_gen": gen, "avg_ts": 10.0} for gen in (0, 1)]
    monkeypatch.setattr(tuning, "run_llama_bench", bench)
    tier = beefcake2.tier("reasoning")
    grid, best, again = tuning.tune(beefcake2, tier, "0", quick=quick)
    assert len(runs) == len(tuning.grid(beefcake2, tier)) + 2 == len(grid) + 2  # the grid, the best twice again
    assert best.decode_tps == again.decode_tps == 10.0
    for argv in runs:
        assert [argv[argv.index(f) + 1] for f in ("-r", "-p", "-n")] == sizes[1::2], argv
