"""Lab fixtures: a booted lab (shared by the lab tests), invoke in process, SSH to the nodes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster
from tests.inprocess import run_invoke

from . import side_runs

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab/cluster.yaml"
NEEDS_LAB = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("systemd-nspawn"),
                               reason="the lab needs root and systemd-nspawn")



# The lab modules in the order that boots and deploys the lab least, after every other test: test_deploy takes the
# lab down and boots it fresh, the modules after it reuse that deployment, and the lifecycle test takes everything
# down last. The soak runs the main job three times, each on a lab of its own, all at once (benchmarks/soak.py
# --apart): it starts as the session does, beside everything else, and test_soak reads its result at the end. The
# CPU rehearsal, which compares speeds measured a minute apart, runs after it (beside the soak, its baseline and its
# served decode differed by 58 %). In a full run, the systemd lab's modules, the SLURM labs' and the unit modules
# that wait on their own clocks run from the start in side runs of their own (side_runs.py), and test_side_runs
# waits for them at the end.
LAB_ORDER = ("test_deploy", "test_apply", "test_bench_recovery", "test_planner_accuracy", "test_verify", "test_lab",
             "test_soak", "test_rehearsal", "test_slurm", "test_side_runs")
SOAK = pytest.StashKey[tuple]()
SIDE = pytest.StashKey[list]()


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: only what the session still runs is handed over
def pytest_collection_modifyitems(config, items):
    """Every other test first, in its place; then the lab modules, in LAB_ORDER. In a full run, the lab test groups
    with labs of their own are handed to side runs (started at once) instead of running here."""
    here = Path(__file__).parent
    lab = sorted((item for item in items if item.path.parent == here),
                 key=lambda item: LAB_ORDER.index(item.path.stem) if item.path.stem in LAB_ORDER else len(LAB_ORDER))
    items[:] = [item for item in items if item.path.parent != here] + lab
    if config.option.collectonly or NEEDS_LAB.args[0]:
        return
    handed, config.stash[SIDE] = side_runs.hand_over(items)
    if handed:
        config.hook.pytest_deselected(items=handed)
        items[:] = [item for item in items if item not in handed]


def finished_side_runs(config) -> list[side_runs.SideRun]:
    """Wait for the side runs the session started (none if it started none)."""
    runs = config.stash.get(SIDE, [])
    for run in runs:
        run.process.wait(timeout=3600)
    return runs


def start_soak() -> tuple:
    """benchmarks/soak.py --runs 3, each run on a lab of its own, all at once, in the background: (process, its JSON
    file, its output file, the folder its first run writes its reports and site in)."""
    folder = Path(tempfile.mkdtemp(prefix="clusterbook-soak-"))
    out, log, work = folder / "soak.json", folder / "soak.log", folder / "work"
    with log.open("w") as stream:
        process = subprocess.Popen([sys.executable, "benchmarks/soak.py", "--runs", "3", "--out", str(out),
                                    "--apart", str(work)], cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)  # its own process group: stopped with its runs
    return process, out, log, work / "run-1"


def pytest_collection_finish(session):
    """Start the soak as soon as it is selected: three main jobs of lab work that the other tests share the machine
    with (they never touch its labs)."""
    if session.config.option.collectonly or NEEDS_LAB.args[0]:
        return
    if any(item.path.name == "test_soak.py" for item in session.items):
        session.config.stash[SOAK] = start_soak()


def pytest_sessionfinish(session):
    background = [session.config.stash.get(SOAK, (None,))[0], *(r.process for r in session.config.stash.get(SIDE, []))]
    for process in background:  # the session ended early (-x, ^C): the background runs go with it
        if process and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=120)


def soak_result(config) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Wait for the soak that the session started (or start one now) and return (result, its JSON file, the folder
    its first run's reports and site are in)."""
    process, out, log, work = config.stash.get(SOAK, None) or start_soak()
    process.wait(timeout=3600)
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), ""), out, work


def invoke(*args, timeout=1800, cluster=LAB, extra_env=None):
    """A task on the lab, in this process (tests/inprocess.py)."""
    return run_invoke(*args, env={"INVOKE_CLUSTERBOOK_CLUSTER": str(cluster), **(extra_env or {})}, timeout=timeout)


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


def no_request_fails_through(cluster_file: Path, fault: str, reports: Path, clients: int = 4) -> dict:
    """Issue 46: `invoke bench.faults` with one fault (its clients through the gateway, half streaming, from 3 s
    before the fault until 3 s after the tier answered again); none may fail. Its run, as its report has it. Four
    clients prove it; the benchmark's 17 (the lab's admitted requests) queue behind one slot and take a minute."""
    result = invoke("bench.faults", "--fault", fault, "--clients", str(clients), cluster=cluster_file, timeout=900,
                    extra_env={"INVOKE_CLUSTERBOOK_REPORTS": str(reports)})
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    report = json.loads((reports / "bench-faults.json").read_text())
    (run,) = report["runs"]
    assert run["fault"] == fault and run["failed"] == [] and run["back_s"] is not None, run
    assert run["requests"] > report["clients"], run  # every client sent, before and after the fault
    return run


def clients_through(cluster, tier_name: str, fault: str, act, clients: int = 2):
    """bench.faults' clients through the gateway (one of two streaming 64 tokens: as the acceptance steps' clients,
    light enough that apply's own scenarios, timed, are not queued past their limits behind them on the lab's
    one-slot CPU tier) while `act` does a fault of the test's own."""
    from clusterbook.effects.connections import connect
    from clusterbook.effects.faults import run_fault
    from clusterbook.effects.probes import api_key
    from clusterbook.pure import topology as topo

    tier = cluster.tier(tier_name)
    key = api_key(connect(cluster), cluster, tier)
    url = topo.client_url(cluster, tier) + "/v1/chat/completions"
    return run_fault(cluster, None, tier, fault, url, key, clients, limit_s=300, act=act,
                     model=tier.served_models[0], stream_tokens=64, settle_s=1)
