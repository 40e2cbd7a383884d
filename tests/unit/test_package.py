"""The package stands alone (issue 68 row 6): a wheel built from the checkout carries the runbooks, their fragments,
clusterbook's patch series, the node programs, the templates and the scenarios; installed into a fresh virtual
environment, `clusterbook` checks the lab's file and lists its tasks from / (no checkout on its path)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return next(out.glob("clusterbook-*.whl"))


def test_the_wheel_carries_what_the_package_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pattern in [("runbooks", "*.yaml"), ("runbooks/fragments", "*.yaml"), ("patches", "*.patch"),
                            ("patches", "*.yaml"), ("clusterbook/node", "*"), ("clusterbook/pure/render/templates",
                                                                              "*.j2"),
                            ("clusterbook/acceptance/features", "*.feature")]:
        files = [p for p in (ROOT / folder).glob(pattern) if p.is_file() and p.suffix != ".pyc"]
        inside = folder if folder.startswith("clusterbook/") else f"clusterbook/{folder}"
        missing = [p.name for p in files if f"{inside}/{p.name}" not in names]
        assert files and not missing, (folder, missing)


def test_installed_from_the_wheel_it_checks_a_file_and_lists_its_tasks_from_the_root_folder(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin/python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies from this environment (a path, not its .pth files: not its editable clusterbook)
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([str(python), "-c", "import clusterbook; print(clusterbook.DATA_ROOT)"], cwd="/",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(Path(site) / "clusterbook"), where  # its own data, not the checkout's
    checked = subprocess.run([str(venv / "bin/clusterbook"), "check", "--cluster", str(ROOT / "lab/cluster.yaml")],
                             cwd="/", capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and "checks passed" in checked.stdout, checked.stdout[-2000:] + checked.stderr
    clusterbook = str(venv / "bin/clusterbook")
    listed = subprocess.run([clusterbook, "--list", "--cluster", str(ROOT / "tests/clusters/ridge.yaml")], cwd="/",
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "deploy.chat" in listed.stdout and "lab.up" in listed.stdout, listed.stderr
    dry = subprocess.run([clusterbook, "deploy.reasoning", "--cluster", str(ROOT / "lab/cluster.yaml"), "--dry",
                          "--no-preflight"], cwd="/", capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0 and "systemctl enable --now llama-reasoning" in dry.stdout, dry.stderr
