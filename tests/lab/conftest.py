"""Lab fixtures: a booted lab (shared by the lab tests), invoke as a subprocess, SSH to the nodes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab/cluster.yaml"
NEEDS_LAB = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("systemd-nspawn"),
                               reason="the lab needs root and systemd-nspawn")


def invoke(*args, timeout=1800, cluster=LAB, extra_env=None):
    env = {**os.environ, "COLUMNS": "200", "INVOKE_CLUSTERBOOK_CLUSTER": str(cluster), **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="session")
def lab_cluster():
    return load_cluster(LAB)


@pytest.fixture(scope="session")
def ssh(lab_cluster):
    return SshTransport(lab_cluster, ROOT)


@pytest.fixture(scope="module")
def fresh_lab():
    """A lab with nothing deployed: taken down and booted again."""
    down = invoke("lab.down")
    assert down.returncode == 0, down.stderr
    up = invoke("lab.up")
    assert up.returncode == 0, up.stdout + up.stderr
    return up
