"""Deploy against the lab: both tiers come up from a fresh lab, re-runs converge, flags restart only what changed."""

import json
import re
import time

import httpx
import pytest

from .conftest import LAB, NEEDS_LAB, ROOT, invoke, run_api_examples

pytestmark = [pytest.mark.lab, NEEDS_LAB]
DEPLOY = ("deploy.install", "models.fetch", "deploy.reasoning", "deploy.fast")


def chat(url, model, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{url}/v1/chat/completions", timeout=120, headers=headers, json={
        "model": model, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "ignore_eos": True})
    r.raise_for_status()
    return r.json()


def active_since(ssh, node, unit):
    return ssh.run(node, f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}").stdout.strip()


def statuses(output):
    return re.findall(r"^\s+\S+ (ok|changed|failed)\s", output, flags=re.M)


def test_fresh_deploy_brings_both_tiers_up(fresh_lab, lab_cluster, ssh):
    result = invoke(*DEPLOY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "changed" in statuses(result.stdout)
    reasoning = chat("http://10.213.0.11:8081", "lab-reasoning")
    assert reasoning["usage"]["completion_tokens"] == 8
    key = ssh.run("lab1", "cat /etc/llama/fast.key").stdout.strip()  # made by deploy, never in the cluster file
    assert len(key) >= 32
    for model in ("lab-fast-a", "lab-fast-b"):
        assert chat("http://10.213.0.11:8080", model, key)["model"] == model
    with pytest.raises(httpx.HTTPStatusError):
        chat("http://10.213.0.11:8080", "lab-fast-a")  # no key: 401
    # the reasoning model's layers sit on all three nodes: the head keeps its blocks on its CPU
    # (-ngl below the block count), and holds a live RPC connection to each worker, which holds tensors
    unit = ssh.run("lab1", "systemctl cat llama-reasoning").stdout
    assert "--n-gpu-layers 9" in unit and "--rpc 10.213.1.12:50052,10.213.1.13:50052" in unit
    for worker, address in (("lab2", "10.213.1.12"), ("lab3", "10.213.1.13")):
        conn = ssh.run("lab1", f"ss -Htn state established '( dst {address} and dport = :50052 )'")
        assert conn.stdout.strip(), f"no RPC connection from the head to {worker}"
        rss = int(ssh.run(worker, "ps -o rss= -C ggml-rpc-server").stdout.split()[0])
        assert rss > 20_000, f"{worker}'s RPC worker holds no tensors (RSS {rss} KiB)"


def test_second_run_changes_nothing_and_is_quick(lab_cluster, ssh):
    before = active_since(ssh, "lab1", "llama-reasoning")
    started = time.monotonic()
    result = invoke(*DEPLOY)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert set(statuses(result.stdout)) == {"ok"}, result.stdout
    assert elapsed <= 10, f"the converged run took {elapsed:.1f} s"
    assert active_since(ssh, "lab1", "llama-reasoning") == before


def test_changing_one_flag_restarts_the_head_only(tmp_path, ssh):
    changed = tmp_path / "cluster.yaml"
    changed.write_text(LAB.read_text().replace("    ctx_size: 2048\n", "    ctx_size: 1536\n"))
    heads = active_since(ssh, "lab1", "llama-reasoning")
    workers = [active_since(ssh, w, "llama-rpc-reasoning") for w in ("lab2", "lab3")]
    fast = active_since(ssh, "lab1", "llama-fast")
    try:
        result = invoke("deploy.reasoning", "deploy.fast", cluster=changed)
        assert result.returncode == 0, result.stderr
        changes = [line for line in result.stdout.splitlines() if re.match(r"^\s+\S+ changed ", line)]
        assert len(changes) == 2, changes
        assert "put /etc/systemd/system/llama-reasoning.service" in changes[0]
        assert "handler restart-head" in changes[1]
        assert active_since(ssh, "lab1", "llama-reasoning") != heads
        assert [active_since(ssh, w, "llama-rpc-reasoning") for w in ("lab2", "lab3")] == workers
        assert active_since(ssh, "lab1", "llama-fast") == fast
        assert "--ctx-size 1536" in ssh.run("lab1", "systemctl cat llama-reasoning").stdout
    finally:
        assert invoke("deploy.reasoning").returncode == 0


def test_unreachable_node_fails_fast_naming_node_and_step_then_converges(lab_cluster, ssh):
    from clusterbook.effects.lab import machines
    from clusterbook.effects.lab.lab import Lab

    lab = Lab(lab_cluster, ROOT)
    ssh.close("lab3")
    machines.stop(lab.machine("lab3"))
    try:
        started = time.monotonic()
        result = invoke("deploy.reasoning")
        elapsed = time.monotonic() - started
        assert result.returncode == 1
        assert elapsed < lab_cluster.access.connect_timeout + 15
        assert "lab3: step 'env'" in result.stderr and "exit status 255" in result.stderr
    finally:
        machines.start(lab_cluster, lab.machine("lab3"))
        lab.wait_ssh(["lab3"])
    again = invoke("deploy.reasoning")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert chat("http://10.213.0.11:8081", "lab-reasoning")["usage"]["completion_tokens"] == 8
    conn = ssh.run("lab1", "ss -Htn state established '( dst 10.213.1.13 and dport = :50052 )'")
    assert conn.stdout.strip(), "the head did not reconnect to lab3 after it came back"


def test_status_and_logs(lab_cluster):
    status = invoke("status")
    assert status.returncode == 0, status.stderr
    for unit in ("llama-reasoning", "llama-rpc-reasoning", "llama-fast"):
        assert unit in status.stdout
    assert "lab-reasoning" in status.stdout
    logs = invoke("logs", "--only", "lab2")
    assert logs.returncode == 0 and "llama-rpc-reasoning" in logs.stdout


def test_stop_and_restart_tier(ssh):
    stop = invoke("stop.fast")
    assert stop.returncode == 0, stop.stderr
    assert ssh.run("lab1", "systemctl is-active llama-fast").stdout.strip() != "active"
    assert set(statuses(invoke("stop.fast").stdout)) == {"ok"}  # stopping twice changes nothing
    assert invoke("deploy.fast").returncode == 0
    restart = invoke("restart.reasoning")
    assert restart.returncode == 0, restart.stderr
    assert chat("http://10.213.0.11:8081", "lab-reasoning")["usage"]["completion_tokens"] == 8


def test_run_log_is_json_lines():
    logs = sorted((ROOT / "runs").glob("*-lab-deploy-rpc-reasoning.jsonl"))
    assert logs
    events = [json.loads(line) for line in logs[-1].read_text().splitlines()]
    assert {"step", "host", "action", "status", "seconds"} <= set(events[0])


def test_the_api_pages_examples_run_against_the_lab(ssh, tmp_path):
    """Each tier's curl and streaming curl example, as the lab's API page shows it, gets an answer."""
    outputs = run_api_examples(LAB, tmp_path, ssh)
    assert len(outputs) == 4  # two tiers, a reply and a stream each
    for out in outputs:
        assert '"chat.completion' in out and '"error"' not in out, out[:500]
    assert sum("data: [DONE]" in out for out in outputs) == 2
