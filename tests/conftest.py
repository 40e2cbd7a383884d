"""Shared fixtures: paths of the cluster files used across the suite."""

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

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


def whole_data(path: Path) -> dict:
    """A cluster file's data with its parts and patch series read in, as one self-contained mapping (no `parts`, no
    `patch_series`): what a test edits and writes elsewhere."""
    return yaml.safe_load(whole_text(path))


def copy_with_parts(folder: Path) -> Path:
    """beefcake2's cluster.yaml and its parts (cluster.d/) copied into `folder`, for a test that edits a part."""
    shutil.copy(CLUSTERS["beefcake2"], folder / "cluster.yaml")
    shutil.copytree(CLUSTERS["beefcake2"].parent / "cluster.d", folder / "cluster.d")
    return folder / "cluster.yaml"


def whole_text(path: Path | None = None) -> str:
    """A cluster file as one self-contained text (beefcake2's unless given): its parts appended, its patch series
    written in. What tests edit as text and load from elsewhere; a line number in it is the test's own."""
    path = path or CLUSTERS["beefcake2"]
    text = path.read_text()
    named = re.search(r"^parts: \[(.*)\]\n", text, re.M)
    if named:
        text = text.replace(named.group(0), "")
    series = re.search(r"^  patch_series: (\S+).*\n", text, re.M)
    if series:
        listed = (CLUSTERS["beefcake2"].parent / series.group(1)).read_text()  # relative to the repository
        listed = listed[listed.index("patches:\n") + len("patches:\n"):]
        text = text.replace(series.group(0), "  patches:\n" + "".join(
            "  " + line if line.strip() else line for line in listed.splitlines(keepends=True)))
    for name in ([n.strip() for n in named.group(1).split(",")] if named else []):
        text = text.rstrip("\n") + "\n\n" + (path.parent / name).read_text()
    return text


@pytest.fixture(scope="session")
def beefcake2_seeds(tmp_path_factory):
    """beefcake2 with the seeds' three-GPU reasoning placement (see seeds_placement)."""
    path = tmp_path_factory.mktemp("seeds") / "cluster.yaml"
    path.write_text(seeds_placement(whole_text()))
    return load_cluster(path)
