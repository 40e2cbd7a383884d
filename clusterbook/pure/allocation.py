"""Heavy work on a node SLURM tiers run on (llama.cpp's build, a model's download and checksum) runs inside a SLURM
allocation of those tiers' partition and QoS, niced: it asks its CPUs and memory of SLURM, beside VASP's jobs and not
under them, and a VASP job preempts it like any AI job (issue 64); while other jobs hold the node it waits, and srun
says so in the step's log. Elsewhere it is only niced. Pure."""

from __future__ import annotations

import shlex

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster

MEM_PER_CPU_GIB = 3  # a compiler process's need (nvcc's largest units), and a download's buffers with room
MEM_SHARE = 0.25  # never more than this share of the node's RAM (the lab's 4 GB nodes: 1 GiB)
BUILD_CPUS = 8  # what a build asks at most: a fifth of a beefcake2 node, the rest stays VASP's


def heavy(c: Cluster, node: str, cpus: int, label: str) -> str:
    """The command prefix that runs a heavy command on `node`: inside an allocation of `cpus` CPUs of the partition
    and QoS of a SLURM tier that may run there, else (no SLURM tier runs on the node) only at the lowest priority."""
    nice = "nice -n 19"
    tier = next((t for t in c.slurm_tiers if node in candidate_nodes(c, t)), None)
    if tier is None:
        return nice
    slurm = tier.slurm
    mem = max(1, min(cpus * MEM_PER_CPU_GIB, int(c.node(node).ram_gb * MEM_SHARE)))
    argv = ["srun", f"--job-name=clusterbook-{label}", f"--partition={slurm.partition}",
            *([f"--qos={slurm.qos}"] if slurm.qos else []), f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={cpus}", f"--mem={mem}G", "--kill-on-bad-exit=1"]
    return " ".join(shlex.quote(a) for a in argv) + " " + nice


def build_cpus(c: Cluster, node: str) -> int:
    """The CPUs a build of llama.cpp asks on its node (ninja's -j): at most BUILD_CPUS, never more than it has."""
    return max(1, min(BUILD_CPUS, c.node(node).cpu_cores))
