"""Shared fixtures: paths of the cluster files used across the suite."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("COLUMNS", "200")  # before clusterbook's console is made: tasks run in process print as in CI
os.environ["CLUSTERBOOK_LAB_ONLY"] = "1"  # no test's live task reaches a cluster that is not a lab (connections.py)

from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = {
    "beefcake2": ROOT / "cluster.yaml",
    "ridge": ROOT / "tests/clusters/ridge.yaml",
    "mini": ROOT / "tests/clusters/mini.yaml",
}


@pytest.fixture(scope="session")
def beefcake2():
    return load_cluster(CLUSTERS["beefcake2"])


@pytest.fixture(scope="session")
def ridge():
    return load_cluster(CLUSTERS["ridge"])


SEEDS_WORKERS = "    workers: [vasp-03]  # D18: vasp-02's GPU stays the fast tier's, so both serve at once\n"
SEEDS_SPLIT = "    tensor_split: {vasp-01: 40, vasp-03: 40}\n"


SEEDS_CO_RESIDE = "  co_reside: [[fast, reasoning]]\n"
D30_PROMPTS = ('    flash_attn: "on"  # D30: a 32K prompt in half the time, and less memory than without it (D26)\n'
               "    batch_size: 1024  # D30: each ubatch dequantizes every weight for cuBLAS once; wider ones do it "
               "less "
               "often\n    ubatch_size: 1024\n")


def seeds_placement(text: str) -> str:
    """beefcake2's file with the reasoning tier where the seeds put it, over all three GPUs (before D18), and its
    prompts as before D30 (flash attention off, ubatch 256): the worked examples of the planner and the exclusion
    of D14 are computed on it."""
    assert SEEDS_WORKERS in text and SEEDS_SPLIT in text, "cluster.yaml's reasoning placement moved: update this"
    assert SEEDS_CO_RESIDE in text, "cluster.yaml's planner.co_reside moved: update this"
    assert D30_PROMPTS in text, "cluster.yaml's reasoning prompt settings moved: update this"
    return (text.replace(SEEDS_WORKERS, "    workers: [vasp-02, vasp-03]\n")
            .replace(D30_PROMPTS, '    flash_attn: "off"\n    batch_size: 256\n    ubatch_size: 256\n')
            .replace(SEEDS_SPLIT, "    tensor_split: {vasp-01: 26, vasp-02: 27, vasp-03: 27}\n")
            .replace(SEEDS_CO_RESIDE, "  co_reside: []\n"))  # D18's declaration came with D18


@pytest.fixture(scope="session")
def beefcake2_seeds(tmp_path_factory):
    """beefcake2 with the seeds' three-GPU reasoning placement (see seeds_placement)."""
    path = tmp_path_factory.mktemp("seeds") / "cluster.yaml"
    path.write_text(seeds_placement(CLUSTERS["beefcake2"].read_text()))
    return load_cluster(path)
