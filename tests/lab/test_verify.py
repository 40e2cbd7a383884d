"""invoke verify against the lab: broken on purpose, the matching scenario fails saying what was expected and what
was measured; status shows Prometheus' figures (every scenario passing on a fresh lab: test_soak.py)."""

import re
import time

import pytest

from .conftest import LAB, NEEDS_LAB, ROOT, invoke

pytestmark = [pytest.mark.lab, NEEDS_LAB]
DEPLOY = ("deploy.install", "models.fetch", "deploy.router", "deploy.reasoning", "deploy.fast", "deploy.embed",
          "deploy.monitoring")


@pytest.fixture(scope="module")
def deployed():
    """The lab as the modules before left it, with every tier, the router and the monitoring deployed."""
    run = invoke(*DEPLOY)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr


def test_status_shows_live_figures_from_prometheus(deployed):
    """After verify generated tokens, Prometheus has a decode speed for the reasoning tier, the probe its health
    and first token, and status shows them, with how old the probe's round is (issue 32: the health column lags)."""
    # healthy by the probe, its first token in seconds, and a decode speed (not "- (no generation)"); verify's last
    # scenarios disrupt the tier, so the probe's next round (every 15 s in the lab) may be needed for the first token
    deadline, row = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        result = invoke("status")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        assert "live, from Prometheus on lab1" in result.stdout
        assert re.search(r"as the tier probe found them \d+ s ago", " ".join(result.stdout.split())), result.stdout
        row = next(line for line in result.stdout.splitlines() if line.startswith("│ reasoning "))
        if re.search(r"│ reasoning\s+│ yes\s+│ \d+\.\d+\s+│ \d+\.\d ", row):
            return
        time.sleep(5)
    pytest.fail(f"expected health, first token and decode speed for reasoning in status, found: {row}")


def test_a_stopped_worker_fails_its_scenario(deployed, ssh):
    assert ssh.run("lab2", "systemctl stop llama-rpc-reasoning").ok
    try:
        result = invoke("verify", "--only", "rpc_worker_is_active")
        assert result.returncode == 1
        assert "llama-rpc-reasoning on lab2: expected active and enabled, found inactive and enabled" in result.stdout
    finally:
        assert invoke("deploy.reasoning").returncode == 0  # starts it, and restarts the head to reconnect


def test_a_target_above_the_lab_fails_with_expected_and_measured(deployed, tmp_path):
    greedy = tmp_path / "cluster.yaml"
    greedy.write_text(LAB.read_text().replace("decode_tps: {target: 5, acceptable: 3, critical: 1}",
                                              "decode_tps: {target: 100000, acceptable: 3, critical: 1}"))
    result = invoke("verify", "--only", "decode_throughput", cluster=greedy)
    assert result.returncode == 1
    assert "tier reasoning: expected decode ≥ 100000 tok/s (target), measured median" in result.stdout


def test_a_failing_scenario_still_builds_the_site_and_exits_non_zero(deployed, tmp_path):
    greedy = tmp_path / "cluster.yaml"
    greedy.write_text(LAB.read_text().replace("decode_tps: {target: 5, acceptable: 3, critical: 1}",
                                              "decode_tps: {target: 100000, acceptable: 3, critical: 1}"))
    site = ROOT / "site/results/index.html"
    site.unlink(missing_ok=True)
    # one scenario suffices to prove the failure path (the soak runs every scenario, three times)
    result = invoke("demo", "--cluster", str(greedy), "--only", "decode throughput", timeout=1800)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    assert "verification failed" in result.stdout and "Results page" in result.stdout
    page = site.read_text()
    assert "Decode throughput and time to first token meet the targets" in page
    assert "expected decode ≥ 100000 tok/s" in page
