"""Flags are derived, not copied: binary names by build, one -ngl, RPC on the fabric, device order."""

import re

import pytest

from clusterbook.model.hosts import resolve_hosts
from clusterbook.model.schema import Engine
from clusterbook.pure import flags, kinds, topology
from clusterbook.pure.layersplit import place_layers
from clusterbook.pure.render.artifacts import render_artifacts

from ..conftest import ROOT


@pytest.mark.parametrize("build, binary", [(7760, "rpc-server"), (9823, "rpc-server"), (9824, "ggml-rpc-server"),
                                           (11434, "ggml-rpc-server")])
def test_rpc_binary_name_follows_build(build, binary):
    assert Engine(build=build, commit="abc1234", install_dir="/x").rpc_worker_binary == binary


def test_rpc_binary_name_can_be_given():
    assert Engine(build=11434, commit="abc1234", install_dir="/x", rpc_binary="my-rpc").rpc_worker_binary == "my-rpc"


@pytest.mark.parametrize("build, spelled", [(7760, ["--mlock"]), (11434, ["--load-mode", "mmap+mlock"])])
def test_mlock_spelling_follows_build(beefcake2, build, spelled):
    cluster = beefcake2.model_copy(update={"engine": beefcake2.engine.model_copy(update={"build": build})})
    argv = kinds.server_argv(cluster, cluster.tier("reasoning"))
    assert " ".join(spelled) in " ".join(argv)
    assert ("--mlock" in argv) == (build < 10105)


def test_head_command_has_one_ngl(beefcake2):
    argv = kinds.server_argv(beefcake2, beefcake2.tier("reasoning"))
    assert sum(a in ("-ngl", "--n-gpu-layers", "--gpu-layers") for a in argv) == 1


def test_workers_bind_to_fabric_never_all_interfaces(beefcake2):
    for artifact in render_artifacts(beefcake2):  # 0.0.0.0 as an address (a subnet such as 10.0.0.0/24 is not)
        assert not re.search(r"(?<![\d.])0\.0\.0\.0(?![\d/])", artifact.text), artifact.path
    argv = flags.worker_argv(beefcake2, beefcake2.tier("reasoning"), "vasp-03")
    assert argv[argv.index("--host") + 1] == "10.100.0.33"
    assert argv[0] == "/opt/clusterbook/llama.cpp/bin/ggml-rpc-server"  # D17: b11434
    older = beefcake2.model_copy(update={"engine": beefcake2.engine.model_copy(update={"build": 7760})})
    old_argv = flags.worker_argv(older, older.tier("reasoning"), "vasp-03")  # the seeds' build: the older name
    assert old_argv[0] == "/opt/clusterbook/llama.cpp/bin/rpc-server"
    assert old_argv[old_argv.index("--host") + 1] == "10.100.0.33"


def test_rpc_over_management_when_no_fabric(ridge):
    assert ridge.rpc_network == "lan"
    assert topology.rpc_endpoints(ridge, ridge.tier("deep")) == ["192.168.50.22:50070", "192.168.50.32:50070"]


def test_tensor_split_in_llama_cpp_device_order(beefcake2_seeds, ridge):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    # beefcake2 declares vasp-01: 26, vasp-02: 27, vasp-03: 27; llama.cpp puts RPC devices first, head last
    assert topology.tensor_split_flag(beefcake2, beefcake2.tier("reasoning")) == "27,27,26"
    devices = topology.tier_devices(ridge, ridge.tier("deep"))
    assert [(d.name, d.node) for d in devices] == [("RPC0", "a2"), ("RPC1", "a2"), ("RPC2", "l2"),
                                                   ("CUDA0", "a1"), ("CUDA1", "a1")]
    assert topology.tensor_split_flag(ridge, ridge.tier("deep")) == "20,20,12,20,20"


# llama.cpp: split points are cumulative shares; block il goes to upper_bound(splits, il / (n_layer + 1)).
@pytest.mark.parametrize("n_layer, shares, expected_blocks, output", [
    (80, [27, 27, 26], [28, 27, 25], 2),   # beefcake2: seed 004 believed 27/27/26
    (12, [1, 1, 1], [5, 4, 3], 2),
    (4, [1], [4], 0),
])
def test_full_offload_layer_placement(n_layer, shares, expected_blocks, output):
    place = place_layers(n_layer, 999, shares, build=7760)
    assert [place.blocks_on(i) for i in range(len(shares))] == expected_blocks
    assert place.output == output


@pytest.mark.parametrize("build, cpu_blocks, output_on_cpu", [(11434, 4, False), (7760, 4, True)])
def test_partial_offload_depends_on_build(build, cpu_blocks, output_on_cpu):
    from clusterbook.pure.layersplit import CPU, cpu_head_ngl
    ngl = cpu_head_ngl(12, 4, build)
    place = place_layers(12, ngl, [1, 1], build)
    assert place.blocks_on(CPU) == cpu_blocks
    assert (place.output == CPU) == output_on_cpu


def test_ssh_route_uses_each_nodes_own_jump_host(beefcake2, ridge):
    assert topology.ssh_route(beefcake2, "vasp-03").command() == \
        "ssh -o ConnectTimeout=10 -J root@100.68.22.98 root@10.0.0.33"
    assert topology.ssh_route(beefcake2, "slurm-ctl").command() == \
        "ssh -o ConnectTimeout=10 root@slurm-ctl.tailc46cd0.ts.net"  # access.connect_timeout
    # two hops: edge (port 2222) then bastion
    assert topology.ssh_route(ridge, "l2").command("uptime") == \
        "ssh -o ConnectTimeout=5 -J jump@edge.ridge.example:2222,ops@192.168.50.2 ops@192.168.50.32 uptime"


@pytest.mark.parametrize("selector, hosts", [("reasoning.workers", ["vasp-02", "vasp-03"]),
                                             ("reasoning.head", ["vasp-01"]), ("fast", ["vasp-02"]),
                                             ("gateway", ["slurm-ctl"]), ("controller", ["slurm-ctl"]),
                                             ("local", []), ("vasp-03", ["vasp-03"])])
def test_host_selectors(beefcake2_seeds, selector, hosts):
    beefcake2 = beefcake2_seeds  # the seeds' three-GPU placement (before D18)
    assert resolve_hosts(beefcake2, selector) == hosts


def test_controller_is_where_sbatch_runs_also_without_the_role():
    """The SLURM lab's nodes have no roles: its slurm section names the controller, and `hosts: controller` (a
    troubleshooting command's) runs there, not on the operator's machine."""
    from clusterbook.model.loader import load_cluster

    lab = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    assert not any("controller" in n.roles for n in lab.nodes)
    assert resolve_hosts(lab, "controller") == [lab.slurm_controller] == ["slab1"]


def test_unknown_selector_explains(beefcake2):
    with pytest.raises(ValueError, match="unknown host selector 'nowhere'"):
        resolve_hosts(beefcake2, "nowhere")


def _without_patch(c, effect):
    engine = c.engine.model_copy(update={"patches": [p for p in c.engine.patches if p.speeds_up != effect]})
    return c.model_copy(update={"engine": engine})


def test_rpc_poll_window_is_twice_a_planned_token_on_gpu_tiers_only(beefcake2):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.planner.capacity import RPC_SPIN_MAX_US, plan_rpc_tier, rpc_spin_us

    tier = beefcake2.tier("reasoning")
    token_s = 1 / plan_rpc_tier(beefcake2, tier).decode_bound_full_ctx_tps
    assert rpc_spin_us(beefcake2, tier) == pytest.approx(2e6 * token_s, abs=1000)  # 114 ms on beefcake2 (D36)
    assert rpc_spin_us(beefcake2, tier) % 1000 == 0
    assert 0 < rpc_spin_us(beefcake2, tier) < RPC_SPIN_MAX_US
    assert rpc_spin_us(beefcake2, beefcake2.tier("fast")) == 0  # a router tier has no RPC
    assert rpc_spin_us(_without_patch(beefcake2, "rpc_wait"), tier) == 0  # no P13: nothing reads it
    lab = load_cluster(ROOT / "lab/cluster.yaml")  # P13 in its series, but its devices are CPUs
    assert any(p.speeds_up == "rpc_wait" for p in lab.engine.patches)
    assert rpc_spin_us(lab, lab.tier("reasoning")) == 0


def test_the_rpc_tiers_variables_reach_head_and_workers_in_both_managers(beefcake2):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.planner.capacity import rpc_spin_us

    spin = rpc_spin_us(beefcake2, beefcake2.tier("reasoning"))
    texts = {a.id: a.text for a in render_artifacts(beefcake2) if a.tier == "reasoning" and a.id in ("env", "sbatch")}
    assert f"\nGGML_RPC_SPIN_US={spin}\n" in texts["env"] and "\nGGML_RPC_KEEP_S=60\n" in texts["env"]
    assert f"\nexport GGML_RPC_SPIN_US={spin}  # head and workers poll up to" in texts["sbatch"]
    lab = load_cluster(ROOT / "lab/cluster.yaml")
    env = next(a.text for a in render_artifacts(lab) if a.tier == "reasoning" and a.id == "env")
    assert "GGML_RPC_SPIN_US" not in env  # CPUs: no poll
    bare = _without_patch(_without_patch(beefcake2, "rpc_wait"), "kept_weights")
    env = next(a.text for a in render_artifacts(bare) if a.tier == "reasoning" and a.id == "env")
    assert "GGML_RPC" not in env


def test_backend_sampling_is_a_flag_of_each_tier_that_asks_for_it(beefcake2):
    for name in ("fast", "reasoning"):
        assert "--backend-sampling" in kinds.server_argv(beefcake2, beefcake2.tier(name))
    tier = beefcake2.tier("reasoning").model_copy(update={"backend_sampling": False})
    assert "--backend-sampling" not in kinds.server_argv(beefcake2, tier)
