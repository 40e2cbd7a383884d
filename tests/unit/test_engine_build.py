"""The build's CMake options follow the cluster's GPUs; one options set, one build tree and release name."""

from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import build_node, cmake_options, cuda_architectures, plan_build

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cluster, archs, node, cuda_compiler", [
    ("cluster.yaml", ["70"], "vasp-01", "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.2/bin/nvcc"),  # V100S
    ("lab/cluster.yaml", [], "lab1", None),  # CPU only: no CUDA option at all
    ("lab/cluster-slurm.yaml", [], "lab1", None),
])
def test_options_follow_the_gpus(cluster, archs, node, cuda_compiler):
    c = load_cluster(ROOT / cluster)
    options = cmake_options(c)
    assert cuda_architectures(c) == archs
    assert build_node(c) == node
    assert "-DGGML_RPC=ON" in options and f"-DLLAMA_BUILD_NUMBER={c.engine.build}" in options
    assert ("-DGGML_CUDA=ON" in options) == bool(archs)
    if archs:
        assert f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}" in options and cuda_compiler in options
    else:
        assert not [o for o in options if "CUDA" in o]


def test_mixed_gpus_build_for_every_architecture():
    c = load_cluster(ROOT / "cluster.yaml")
    data = c.model_dump()
    data["nodes"][1]["gpus"][0]["compute_capability"] = "8.0"
    mixed = type(c).model_validate(data)
    assert cuda_architectures(mixed) == ["70", "80"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=70;80" in cmake_options(mixed)


def test_other_options_are_another_build_and_release():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    data = c.model_dump()
    data["engine"]["build"] = 11433
    other = type(c).model_validate(data)
    a, b = plan_build(c), plan_build(other)
    assert a.key != b.key and a.root != b.root and a.release != b.release
    assert a.release == f"/cluster/shared/releases/llama.cpp-b11434-{a.key}.tar.gz"
    assert plan_build(c) == a  # deterministic
