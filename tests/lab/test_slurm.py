"""The SLURM way (seed 004) in the lab: slurmctld and slurmd in the containers, both tiers as preemptible jobs,
the gateway following them; verify passes every scenario, preemption included; stop shuts down cleanly."""

import json
import time

import pytest

from .conftest import NEEDS_LAB, ROOT, invoke, run_api_examples

pytestmark = [pytest.mark.lab, NEEDS_LAB]
SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"
DEPLOY = ("deploy.install", "models.fetch", "deploy.router", "deploy.gateway", "deploy.fast", "deploy.reasoning")


@pytest.fixture(scope="module")
def slurm_lab():
    # the same containers as lab/cluster.yaml: its systemd tiers must not run beside the SLURM jobs
    invoke("stop.fast", "stop.reasoning", cluster=ROOT / "lab/cluster.yaml")
    up = invoke("lab.up", "--slurm", cluster=SLURM_LAB)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr
    run = invoke(*DEPLOY, cluster=SLURM_LAB)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert "serving: job" in run.stdout  # deploy reports the job id, nodes and endpoint
    yield
    invoke("stop.fast", "stop.reasoning", cluster=SLURM_LAB)


def test_slurm_is_configured(slurm_lab, ssh):
    out = ssh.run("lab1", "sinfo -h -o '%P %D %T'").stdout
    assert any(line.startswith("ai* ") and "down" not in line for line in out.splitlines()), out
    assert sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("ai* ")) == 3, out


def test_verify_passes_with_preemption(slurm_lab):
    result = invoke("verify", "--disruptive", cluster=SLURM_LAB, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    summary = (ROOT / "reports/verify-summary.md").read_text()
    row = next(line for line in summary.splitlines() if "preempted tier" in line)
    assert "| passed |" in row and "moved: lab1 -> lab" in row


def test_redeploy_changes_nothing(slurm_lab):
    result = invoke("deploy.fast", "deploy.reasoning", "deploy.gateway", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert " changed " not in "\n".join(line for line in result.stdout.splitlines() if not line.startswith(("┃", "│")))


def test_stop_is_clean_within_the_grace_time(slurm_lab, ssh):
    started = time.monotonic()
    result = invoke("stop.fast", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10 + 15  # grace_seconds of the lab's tiers, plus SSH and polling
    assert ssh.run("lab1", "squeue -h -n llama-fast").stdout.strip() == ""
    assert not ssh.run("lab1", "test -e /cluster/shared/endpoints/fast.json").ok, "record left behind"
    log = ssh.run("lab1", "cat /cluster/shared/logs/llama-fast-*.log").stdout
    assert "SIGTERM (preemption or scancel), shutting down" in log
    assert invoke("deploy.fast", cluster=SLURM_LAB).returncode == 0
    record = json.loads(ssh.run("lab1", "cat /cluster/shared/endpoints/fast.json").stdout)
    assert record["tier"] == "fast" and record["port"] == 8180


def test_status_shows_jobs_nodes_and_endpoints(slurm_lab):
    result = invoke("status", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert "SLURM jobs" in result.stdout
    for job in ("llama-fast", "llama-reasoning"):
        row = next(line for line in result.stdout.splitlines() if line.startswith(f"│ {job} "))
        assert "RUNNING" in row and "http://10.213.0." in row, row


def test_bench_recovery_under_slurm(slurm_lab, tmp_path):
    """A killed worker step ends the job and a requeue restarts the head: both come back through the gateway, timed
    from the job leaving and running again, with the load from the head step's own log."""
    result = invoke("bench.recovery", "--runs", "1", cluster=SLURM_LAB, timeout=900,
                    extra_env={"INVOKE_CLUSTERBOOK_REPORTS": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    report = json.loads((tmp_path / "bench-recovery.json").read_text())
    assert [r["case"] for r in report["runs"]] == ["worker killed", "head restarted"]
    assert report["predicted"]["restart"] == "SLURM requeue"
    for r in report["runs"]:
        assert sorted(r["phases"], key=r["phases"].get) == ["job left running", "job running", "first answer"], r
        # the requeue hold (30 s in the lab) passes before the job runs again
        assert r["phases"]["job running"] >= 30 - 2, r
        assert r["load_s"] is not None and r["load_s"] > 0, r


def test_the_api_pages_examples_run_against_the_slurm_lab(slurm_lab, ssh, tmp_path):
    """Through the gateway, as the SLURM lab's API page shows them."""
    outputs = run_api_examples(SLURM_LAB, tmp_path, ssh)
    assert len(outputs) == 4
    for out in outputs:
        assert '"chat.completion' in out and '"error"' not in out, out[:500]
