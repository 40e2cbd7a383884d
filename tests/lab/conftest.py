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


# The lab modules in the order that boots and deploys the lab least: test_deploy takes it down and boots it fresh,
# the modules after it reuse that deployment, the soak (test_verify) leaves it deployed again, the SLURM lab runs on
# the same containers, and the lifecycle test takes everything down last.
LAB_ORDER = ("test_deploy", "test_apply", "test_bench_recovery", "test_planner_accuracy", "test_rehearsal",
             "test_verify", "test_slurm", "test_lab")


def pytest_collection_modifyitems(items):
    """Run the lab modules in LAB_ORDER; every other test keeps its place."""
    slots = [i for i, item in enumerate(items) if item.path.parent == Path(__file__).parent]
    ordered = sorted((items[i] for i in slots), key=lambda item: LAB_ORDER.index(item.path.stem)
                     if item.path.stem in LAB_ORDER else len(LAB_ORDER))
    for slot, item in zip(slots, ordered):
        items[slot] = item


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


def run_api_examples(cluster_file: Path, site: Path, ssh) -> list[str]:
    """Build the cluster's docs and run every curl example of its API page against the lab, with the tier's real
    key where the page says KEY=...; the outputs, one per example."""
    import html
    import re

    from clusterbook.effects.probes import api_key

    build = invoke("docs", "--out", str(site), cluster=cluster_file)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr
    cluster = load_cluster(cluster_file)
    page = (site / "api/index.html").read_text()
    blocks = [html.unescape(re.sub(r"<[^>]+>", "", b)) for b in
              re.findall(r'<div class="language-bash highlight"><pre>(.*?)</pre></div>', page, re.S)]
    keys = {t.name: api_key(ssh, cluster, t) for t in cluster.tiers}
    outputs = []
    for block in blocks:
        tier = next(t for t in cluster.tiers if f'"model": "{t.served_models[0]}"' in block)
        script = block.replace("KEY=...", f"KEY={keys[tier.name]}") if keys[tier.name] else block
        run = subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}"], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, f"{block}\n{run.stderr}"
        outputs.append(run.stdout)
    return outputs
