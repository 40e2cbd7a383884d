"""Lab fixtures: a booted lab (shared by the lab tests), invoke in process, SSH to the nodes."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster
from tests.inprocess import run_invoke

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab/cluster.yaml"
NEEDS_LAB = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("systemd-nspawn"),
                               reason="the lab needs root and systemd-nspawn")


# The lab modules in the order that boots and deploys the lab least, after every other test: the soak (test_verify)
# starts as the session does and runs beside the tests that need no lab (it waits, they compute), and leaves the lab
# deployed for the rest of its module; test_deploy takes it down and boots it fresh, the modules after it reuse that
# deployment, the SLURM lab runs on the same containers, and the lifecycle test takes everything down last.
LAB_ORDER = ("test_verify", "test_deploy", "test_apply", "test_bench_recovery", "test_planner_accuracy",
             "test_rehearsal", "test_slurm", "test_lab")
SOAK = pytest.StashKey[tuple]()


def pytest_collection_modifyitems(items):
    """Every other test first, in its place; then the lab modules, in LAB_ORDER."""
    here = Path(__file__).parent
    lab = sorted((item for item in items if item.path.parent == here),
                 key=lambda item: LAB_ORDER.index(item.path.stem) if item.path.stem in LAB_ORDER else len(LAB_ORDER))
    items[:] = [item for item in items if item.path.parent != here] + lab


def start_soak() -> tuple:
    """benchmarks/soak.py --runs 3 in the background: (process, its JSON file, its output file)."""
    folder = Path(tempfile.mkdtemp(prefix="clusterbook-soak-"))
    out, log = folder / "soak.json", folder / "soak.log"
    with log.open("w") as stream:
        process = subprocess.Popen([sys.executable, "benchmarks/soak.py", "--runs", "3", "--out", str(out)],
                                   cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)  # its own process group: stopped with its invoke runs
    return process, out, log


def pytest_collection_finish(session):
    """Start the soak as soon as it is selected: about seven minutes of lab work that the tests before the lab's
    share with it (they never touch the lab)."""
    if session.config.option.collectonly or NEEDS_LAB.args[0]:
        return
    if any(item.path.name == "test_verify.py" for item in session.items):
        session.config.stash[SOAK] = start_soak()


def pytest_sessionfinish(session):
    process = session.config.stash.get(SOAK, (None,))[0]
    if process and process.poll() is None:  # the session ended early (-x, ^C): the soak goes with it
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def soak_result(config) -> tuple[subprocess.CompletedProcess, Path]:
    """Wait for the soak that the session started (or start one now) and return (result, its JSON file)."""
    process, out, log = config.stash.get(SOAK, None) or start_soak()
    process.wait(timeout=3600)
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), ""), out


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


def no_request_fails_through(cluster_file: Path, ssh, fault: str, clients: int = 4) -> None:
    """Issue 46: `clients` clients send chat completions to the reasoning tier through the gateway, half of them
    streaming, from 3 s before the fault (effects/recovery.disrupt) until 3 s after a request sent after it was
    answered; none may fail (a stream must end with [DONE] and no error event). Prints how many were sent, how many
    streams were resumed and the longest any took, beside the hold's bound."""
    import httpx

    from clusterbook.effects.recovery import disrupt
    from clusterbook.pure.planner.capacity import plan_tier
    from clusterbook.pure.planner.loadtime import hold_s

    c = load_cluster(cluster_file)
    tier = c.tier("reasoning")
    route = next(r for r in c.gateway.routes if r.tier == tier.name)
    url = f"http://{c.gateway.listen[0]}:{route.port}/v1/chat/completions"
    results, stop = [], threading.Event()

    def client(stream: bool):
        while not stop.is_set():
            started = time.monotonic()
            body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 400 if stream else 8,
                    "stream": stream, "ignore_eos": stream}  # a long stream: in flight when the fault comes
            try:
                answer = httpx.post(url, json=body, timeout=120)
                ok = answer.status_code == 200 and (not stream or (answer.text.rstrip().endswith("data: [DONE]")
                                                                    and '"error"' not in answer.text))
                results.append((started, 200 if ok else answer.status_code, time.monotonic() - started))
                resumed.append(": clusterbook: the stream resumed" in answer.text)
            except httpx.HTTPError as exc:
                results.append((started, repr(exc), time.monotonic() - started))
            time.sleep(0.2)
    resumed = []
    threads = [threading.Thread(target=client, args=(i % 2 == 1,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    disrupt(c, ssh, tier, fault)
    at = time.monotonic()
    while time.monotonic() - at < 120 and not any(s > at + 1 and code == 200 for s, code, _ in results):
        time.sleep(0.5)
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(130)
    failed = [(round(s - at, 1), code) for s, code, _ in results if code != 200]
    longest = max(d for s, _, d in results if s > at - 5)
    print(f"{fault}: {len(results)} requests, {len(failed)} failed, {sum(resumed)} streams resumed; the longest took "
          f"{longest:.1f} s (hold bound "
          f"{hold_s(c, tier, plan_tier(c, tier))} s)")
    assert not failed, f"requests that failed (seconds after the fault, status): {failed}"
    assert any(s > at + 1 and code == 200 for s, code, _ in results), "no request was answered after the fault"
