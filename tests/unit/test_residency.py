"""The cluster plan: what runs at the same time must fit together; SLURM tiers that cannot be placed together are
stated, not refused; a router tier's models are split over its node's GPUs; RAM holds CPU devices and mlock."""

from pathlib import Path

import yaml

from clusterbook.model.loader import load_cluster
from clusterbook.model.schema import Cluster
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.planner.capacity import GIB
from clusterbook.pure.planner.findings import plan_findings
from clusterbook.pure.planner.residency import exclusion_text, plan_residency
from tests.conftest import whole_text

from ..conftest import seeds_placement

ROOT = Path(__file__).resolve().parents[2]
MINI = yaml.safe_load((ROOT / "tests/clusters/mini.yaml").read_text())
GPU16 = {"model": "GPU", "memory_mib": 16384, "compute_capability": "8.0", "bandwidth_gbs": 900}


def cluster(**changes) -> Cluster:
    data = yaml.safe_load(yaml.safe_dump(MINI))
    for key, value in changes.items():
        data[key] = value
    return Cluster.model_validate(data)


def model(mid: str, gb: float, layers: int = 40, context: int = 32768) -> dict:
    return {"id": mid, "file": f"{mid}.gguf", "approx_size_gb": gb, "quantization": "Q8_0",
            "architecture": {"layers": layers, "heads": 32, "kv_heads": 8, "head_dim": 128, "embedding": 4096,
                             "vocab": 32000, "context": context}}


def node(name: str, last: int, gpus: list | None = None, ram_gb: float = 64) -> dict:
    return {"name": name, "hostname": name, "addresses": {"mgmt": f"10.1.0.{last}", "ib": f"10.2.0.{last}"},
            "gpus": gpus if gpus is not None else [GPU16], "cpu_cores": 8, "ram_gb": ram_gb}


def rpc(name: str, mdl: str, head: str, workers: list[str], port: int, **extra) -> dict:
    return {"name": name, "kind": "rpc", "model": mdl, "head": head, "workers": workers, "port": port,
            "rpc_port": port + 40000, "tensor_split": {n: 1 for n in [head, *workers]}, "ctx_size": 4096, **extra}


def router(name: str, where: str, models: list[str], port: int, **extra) -> dict:
    return {"name": name, "kind": "router", "node": where, "models": models, "port": port, "ctx_size": 4096,
            **extra}


def findings(c: Cluster) -> list[str]:
    return [message for _, message in plan_findings(c, plan_cluster(c))]


def test_two_systemd_tiers_that_fit_alone_but_not_together_on_a_gpu_are_refused():
    c = cluster(nodes=[node("n1", 1), node("n2", 2)], models=[model("big", 20), model("mid", 9)],
                tiers=[rpc("deep", "big", "n1", ["n2"], 8081), router("chat", "n2", ["mid"], 8082, models_max=1)])
    plans = plan_cluster(c)
    assert plans["deep"].fits and plans["chat"].fits  # each alone
    problems = findings(c)
    together = [p for p in problems if "do not fit together" in p]
    assert len(together) == 1, problems
    assert "n2 GPU0" in together[0] and "deep" in together[0] and "chat" in together[0] and "GiB usable" in together[0]


def test_two_slurm_tiers_that_need_the_same_gpu_exclude_each_other_and_the_plan_says_so():
    slurm = {"partition": "gpu", "mem": "60G"}
    c = cluster(nodes=[{**node("n1", 1), "roles": ["controller"]}, node("n2", 2)],
                models=[model("big", 20), model("mid", 9)],
                tiers=[rpc("deep", "big", "n1", ["n2"], 8081, manager="slurm", slurm=slurm),
                       router("chat", "n2", ["mid"], 8082, models_max=1, manager="slurm", slurm=slurm)])
    cplan = plan_residency(c, plan_cluster(c))
    assert [(e.first, e.second) for e in cplan.exclusions] == [("deep", "chat")]
    assert exclusion_text(cplan) == ["deep and chat cannot run at the same time: both need n2's GPU (its only GPU; "
                                     "--gres=gpu:1 and gpu:1): one waits in the queue."]
    assert sorted(cplan.groups) == [("chat",), ("deep",)]
    assert not [p for p in findings(c) if "fit together" in p]  # SLURM serializes them: not an error


def test_slurm_tiers_on_different_nodes_run_together():
    slurm = {"partition": "gpu", "mem": "20G"}
    c = cluster(nodes=[{**node("n1", 1), "roles": ["controller"]}, node("n2", 2), node("n3", 3)],
                models=[model("big", 20), model("mid", 9)],
                tiers=[rpc("deep", "big", "n1", ["n2"], 8081, manager="slurm", slurm=slurm),
                       router("chat", "n3", ["mid"], 8082, models_max=1, manager="slurm", slurm=slurm)])
    cplan = plan_residency(c, plan_cluster(c))
    assert cplan.exclusions == [] and cplan.groups == [("deep", "chat")]


def test_a_router_tier_splits_its_models_by_layers_over_every_gpu_of_its_node():
    c = cluster(nodes=[node("n1", 1, gpus=[{**GPU16, "count": 4}]), node("n2", 2)],
                models=[model("a", 8, layers=40), model("b", 6, layers=32), model("m", 0.001, layers=4,
                                                                                 context=4096)],
                tiers=[router("chat", "n1", ["a", "b"], 8082, models_max=2)])
    devices = plan_cluster(c)["chat"].devices
    assert [d.device for d in devices] == ["CUDA0", "CUDA1", "CUDA2", "CUDA3"]
    assert sum(d.blocks for d in devices) == 40 + 32  # both resident models, every block placed
    assert all(d.blocks > 0 for d in devices)  # not "blocks 0" on each GPU
    assert [d.output for d in devices] == [False, False, False, True]
    total = sum(d.weights for d in devices)
    assert abs(max(d.weights for d in devices) - total / 4) < 0.15 * total  # about a quarter each


def test_a_cpu_only_worker_whose_share_exceeds_its_ram_is_refused():
    c = cluster(nodes=[node("n1", 1), node("n2", 2, gpus=[], ram_gb=8)], models=[model("big", 24)],
                tiers=[rpc("deep", "big", "n1", ["n2"], 8081)])
    problems = findings(c)
    ram = [p for p in problems if "RAM" in p]
    assert len(ram) == 1, problems
    assert ram[0].startswith("n2's RAM does not hold what stays resident: deep RPC worker")
    assert "of 7.6 GB usable" in ram[0]


def test_mlock_is_checked_against_the_heads_ram():
    c = cluster(nodes=[node("n1", 1, ram_gb=16), node("n2", 2)], models=[model("big", 20)],
                tiers=[rpc("deep", "big", "n1", ["n2"], 8081, mlock=True)])
    ram = [p for p in findings(c) if "RAM" in p]
    assert len(ram) == 1 and "n1's RAM" in ram[0] and "deep mlock of the model file 20.0 GB" in ram[0]
    relaxed = cluster(nodes=[node("n1", 1, ram_gb=64), node("n2", 2)], models=[model("big", 20)],
                      tiers=[rpc("deep", "big", "n1", ["n2"], 8081, mlock=True)])
    assert not [p for p in findings(relaxed) if "RAM" in p]


def test_beefcake2_states_that_fast_and_reasoning_exclude_each_other_on_vasp_02(beefcake2_seeds):
    c = beefcake2_seeds  # the seeds' placement (D14); D18 moved reasoning off vasp-02: test_solver.py
    plans = plan_cluster(c)
    cplan = plan_residency(c, plans)
    assert exclusion_text(cplan) == ["fast and reasoning cannot run at the same time: both need vasp-02's GPU (its "
                                     "only GPU; --gres=gpu:1 and gpu:1): one waits in the queue."]
    fast = sum(d.total for d in plans["fast"].devices) / GIB
    worker = next(d for d in plans["reasoning"].devices if d.node == "vasp-02").total / GIB
    assert round(fast, 2) == 24.71 and round(worker, 2) == 21.18  # together 45 GiB on a 30.4 GiB V100S
    load = cplan.load("vasp-02", "GPU0")
    assert load.fits and load.tiers in (["fast"], ["reasoning"])  # never both at once


def test_beefcake2_as_systemd_tiers_is_refused_naming_vasp_02_and_both_tiers(tmp_path):
    text = seeds_placement(whole_text()).replace("manager: slurm", "manager: systemd")
    c = Cluster.model_validate(yaml.safe_load(text))
    together = [p for p in findings(c) if "do not fit together" in p]
    assert together == ["fast, reasoning run at the same time but do not fit together on vasp-02 GPU0 "
                        "(Tesla V100S-PCIE-32GB): fast router mode 24.71 GiB + reasoning RPC worker 21.18 GiB = "
                        "45.89 GiB of 30.40 GiB usable"]


def test_two_rpc_tiers_sharing_workers_and_a_cpu_only_worker_plan_cleanly():
    c = load_cluster(ROOT / "tests/clusters/shared-workers.yaml")
    assert findings(c) == []
    cplan = plan_residency(c, plan_cluster(c))
    assert cplan.groups == [tuple(t.name for t in c.tiers)]  # systemd tiers: always together
    shared = cplan.load("w1", "GPU0")
    assert shared.tiers == ["alpha", "beta"]
    assert cplan.load("cpu1", "RAM").tiers == ["beta"]
