"""Preflight's verdicts on a node's facts (what `facts_command` prints), table-driven: each broken fact fails its
check, naming what was expected and what was found; a CPU node's GPU check is skipped with its reason."""

import subprocess
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.preflight import facts_command, judge, parse_facts

ROOT = Path(__file__).resolve().parents[2]
BEEFCAKE2 = load_cluster(ROOT / "cluster.yaml")
LAB = load_cluster(ROOT / "lab/cluster.yaml")

GOOD = """\
os=rocky|8.10
toolset=12
gpu=Tesla V100S-PCIE-32GB|32768|535.183.01
cuda=12.2
avail=200000000000
iface=ib0|up|2044
numa=0
cpus=40
shared=nfs4|writable
port=8081|
port=9100|node_exporter
now=1000.2
"""


def verdicts(text: str, node: str = "vasp-01", cluster=BEEFCAKE2, asked: tuple = (1000.0, 1000.0)) -> dict:
    return {c.check: (c.verdict, c.expected, c.found) for c in judge(cluster, node, parse_facts(text), asked)}


def test_a_node_as_declared_passes_every_check():
    found = verdicts(GOOD)
    assert {check: v[0] for check, v in found.items()} == {
        "GPUs": "ok", "driver's CUDA": "ok", "free space in /scratch/ai/models": "ok", "fabric interface": "ok",
        "clock": "ok", "operating system": "ok", "NVIDIA driver": "ok", "compiler": "ok", "GPU 0's NUMA node": "ok",
        "CPUs": "ok", "shared folder /cluster/shared": "ok", "port 8081": "ok", "port 9100": "ok"}  # Rocky 8.10
    assert found["free space in /scratch/ai/models"][1] == "≥ 47.4 GB for OR1-Behemoth"


@pytest.mark.parametrize("change, check, found", [
    (("gpu=Tesla V100S-PCIE-32GB|32768", "gpu=Tesla V100-PCIE-16GB|16384"), "GPUs", "Tesla V100-PCIE-16GB 16384 MiB"),
    (("gpu=Tesla V100S-PCIE-32GB|32768|535.183.01\n", ""), "GPUs", "no nvidia-smi or no GPU"),
    (("cuda=12.2", "cuda=11.8"), "driver's CUDA", "11.8 (driver 535.183.01)"),
    (("os=rocky|8.10", "os=rocky|8.9"), "operating system", "rocky 8.9"),
    (("os=rocky|8.10", "os=debian|12"), "operating system", "debian 12"),
    (("|535.183.01", "|550.54.15"), "NVIDIA driver", "550.54.15"),
    (("avail=200000000000", "avail=40000000000"), "free space in /scratch/ai/models", "40.0 GB"),
    (("iface=ib0|up|2044", "iface=ib0|down|2044"), "fabric interface", "ib0 down, MTU 2044"),
    (("iface=ib0|up|2044", "iface=ib0|up|1500"), "fabric interface", "ib0 up, MTU 1500"),
    (("iface=ib0|up|2044\n", ""), "fabric interface", "no interface holds the address"),
    (("iface=ib0|up|2044\n", "down=ib0\n"), "fabric interface", "no interface holds the address (down: ib0)"),
    (("now=1000.2", "now=1005.0"), "clock", "+5.00 s"),
    (("numa=0", "numa=1"), "GPU 0's NUMA node", "1"),  # numactl --cpunodebind=0 would bind the head far from it
    (("numa=0\n", ""), "GPU 0's NUMA node", "unknown"),
    (("cpus=40", "cpus=20"), "CPUs", "20"),  # the job's --cpus-per-task=40 would never start
])
def test_each_broken_fact_fails_its_check_with_the_figures(change, check, found):
    verdict, _expected, seen = verdicts(GOOD.replace(*change))[check]
    assert (verdict, seen) == ("failed", found)


@pytest.mark.parametrize("now, asked, verdict, found", [
    # CI, 2026-12-06: a node's clock read late in a 4 s answer (a starved machine) was +2.48 s from its midpoint
    (1004.4, (1000.0, 1004.0), "ok", "+0.40 s beyond the 4.0 s the answer took"),
    (1002.4, (1000.0, 1000.0), "failed", "+2.40 s"),
    (1007.5, (1000.0, 1005.0), "failed", "+2.50 s beyond the 5.0 s the answer took"),
    (997.9, (1000.0, 1005.0), "failed", "-2.10 s beyond the 5.0 s the answer took"),
    (1003.0, (1000.0, 1005.0), "ok", "within the 5.0 s the answer took"),
])
def test_a_clock_is_skewed_only_by_how_far_it_falls_outside_the_round_trip(now, asked, verdict, found):
    assert verdicts(GOOD.replace("now=1000.2", f"now={now}"), asked=asked)["clock"][::2] == (verdict, found)


def test_one_numa_node_is_node_0():
    assert verdicts(GOOD.replace("numa=0", "numa=-1"))["GPU 0's NUMA node"][0] == "ok"


def test_a_model_already_on_the_node_needs_no_space():
    text = GOOD.replace("avail=200000000000", "avail=1000") + "have=OR1-Behemoth.Q4_K_M.gguf|47369119648\n"
    assert verdicts(text)["free space in /scratch/ai/models"][0] == "ok"


def test_a_cpu_node_skips_the_gpu_check_with_its_reason():
    found = verdicts("avail=100000000000\niface=fabric0|up|1500\nnow=1000.0\n", "lab2", LAB)
    assert found["GPUs"] == ("skipped", "none (CPU node)", "none")
    assert "driver's CUDA" not in found and found["fabric interface"][0] == "ok"


def test_the_facts_command_is_valid_shell():
    for cluster in (BEEFCAKE2, LAB):
        for node in cluster.nodes:
            check = subprocess.run(["bash", "-n"], input=facts_command(cluster, node.name), text=True,
                                   capture_output=True)
            assert check.returncode == 0, (node.name, check.stderr)


@pytest.mark.parametrize("fact, check, found", [
    ("shared=missing", "shared folder /cluster/shared", "not there"),
    ("shared=nfs4|read-only", "shared folder /cluster/shared", "nfs4, read-only"),
    ("port=8081|httpd", "port 8081", "held by httpd"),  # another service on the tier's port: the head cannot start
])
def test_what_the_bring_up_needs_of_a_node_is_found_before_it_starts(fact, check, found):
    """Issue 66: preflight did not look at the shared folder or the ports the node's services take."""
    key = fact.split("=")[0] + "=" + ("8081|" if fact.startswith("port=") else "nfs4|writable")
    verdict, _, seen = verdicts(GOOD.replace(key, fact))[check]
    assert (verdict, seen) == ("failed", found)


@pytest.mark.parametrize("holder, verdict", [
    ("llama-server", "ok"),  # clusterbook's head, or the seeds' until stop.legacy retires it
    ("python3", "failed"),  # a program clusterbook runs, but not on a tier's port: someone's script
    ("nginx", "failed"),
])
def test_a_port_may_be_held_only_by_what_its_claim_runs(holder, verdict):
    """Each port by the field that claims it: a tier's by the engine's server (or the seeds'), the gateway's by nginx,
    the hold's by python3; not any of clusterbook's programs on any of its ports."""
    assert verdicts(GOOD.replace("port=8081|", f"port=8081|{holder}"))["port 8081"][0] == verdict


@pytest.mark.parametrize("port, holder", [(9093, "prometheus-aler"), (9093, "alertmanager"), (9090, "prometheus"),
                                          (9100, "prometheus-node"), (9100, "node_exporter")])
def test_the_monitoring_ports_may_be_held_by_debians_and_els_programs(port, holder):
    """As ss names them (15 characters): the SLURM lab's redeploy found Debian's Alertmanager on its own port."""
    facts = f"port={port}|{holder}\n"
    found = verdicts(facts, node="slurm-ctl")
    assert found[f"port {port}"][0] == "ok", found[f"port {port}"]


def test_the_keepers_node_finds_the_partitions_and_qos_the_tiers_ask_for():
    facts = "partition=gpu_ai\npartition=vasp_priority\nqos=normal\nqos=ai_opportunistic\n"
    found = verdicts(facts, node="slurm-ctl")
    assert found["SLURM partition gpu_ai"][0] == "ok" and found["SLURM qos ai_opportunistic"][0] == "ok"
    missing = verdicts("partition=vasp_priority\nqos=normal\n", node="slurm-ctl")
    assert missing["SLURM partition gpu_ai"][0] == "failed" and missing["SLURM qos ai_opportunistic"][0] == "failed"


def test_a_partition_the_clusterbook_slurm_conf_adds_is_not_a_blocker():
    """Where clusterbook writes slurm.conf (the file's slurm section), a partition it names is one deploy.slurm adds:
    missing before it runs is expected (found on the SLURM lab, adding the embeddings tier's partition)."""
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.preflight import shared_and_port_checks

    lab = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    checks = {c.check: c for c in shared_and_port_checks(lab, lab.keeper_node, {"partition": ["vasp"]})}
    ai = checks["SLURM partition ai"]
    assert ai.verdict == "ok" and "deploy.slurm writes it" in ai.found
