"""The SLURM way (seed 004) in the lab: slurmctld and slurmd in the containers, both tiers as preemptible jobs,
the gateway following them; verify passes every scenario, preemption included; stop shuts down cleanly. The SLURM
lab has containers of its own (slab1-3): in a full run these tests run beside the systemd lab's (conftest.py)."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster
from clusterbook.pure import layout
from tests.conftest import whole_text

from . import seeds_setup
from .conftest import NEEDS_LAB, ROOT, clients_through, invoke, no_request_fails_through, run_api_examples
from .side_runs import slurm_lab_file
from .test_apply import latest_change, with_missing_model

pytestmark = [pytest.mark.lab, NEEDS_LAB]
SLURM_LAB = slurm_lab_file()  # lab/cluster-slurm.yaml, or its twin in a full run (side_runs.py)
NAME = load_cluster(SLURM_LAB).cluster.name
HEAD, SLAB2, SLAB3 = (node.name for node in load_cluster(SLURM_LAB).nodes)  # slab1-3 in lab/cluster-slurm.yaml
HEAD_IP = load_cluster(SLURM_LAB).node(HEAD).addresses["management"]
REPORTS = Path(os.environ.get("INVOKE_CLUSTERBOOK_REPORTS", ROOT / "reports"))  # a run beside the others has its own
DEPLOY = ("deploy.install", "models.fetch", "deploy.router", "deploy.gateway", "deploy.fast", "deploy.reasoning",
          "deploy.monitoring")


@pytest.fixture(scope="module")
def ssh():
    return SshTransport(load_cluster(SLURM_LAB), ROOT)


SEEDS_DIGESTS: dict = {}  # the seeds' files as they were before stop.legacy (test_restore_legacy_… compares)


@pytest.fixture(scope="module")
def slurm_lab(ssh):
    """The bring-up as beefcake2's: the engine and models, then the seeds' setup retired (running here first, as it
    ran there: seeds_setup.py), then the tiers, gateway and monitoring."""
    up = invoke("lab.up", "--slurm", "--cluster", str(SLURM_LAB), cluster=SLURM_LAB)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr
    run = invoke(*DEPLOY[:2], cluster=SLURM_LAB)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    SEEDS_DIGESTS.update(seeds_setup.put(ssh))
    run = invoke("stop.legacy", *DEPLOY[2:], cluster=SLURM_LAB)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert "serving: job" in run.stdout  # deploy reports the job id, nodes and endpoint
    yield
    invoke("stop.fast", "stop.reasoning", cluster=SLURM_LAB)
    down = invoke("lab.down", "--cluster", str(SLURM_LAB))  # its containers go with its tests
    assert down.returncode == 0, down.stdout[-2000:] + down.stderr


def test_slurm_is_configured(slurm_lab, ssh):
    out = ssh.run(HEAD, "sinfo -h -o '%P %D %T'").stdout
    assert any(line.startswith("ai* ") and "down" not in line for line in out.splitlines()), out
    assert sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("ai* ")) == 3, out


def test_verify_passes_with_preemption(slurm_lab):
    result = invoke("verify", "--disruptive", cluster=SLURM_LAB, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    results = json.loads((REPORTS / "verify-summary.json").read_text())
    preempted = next(r for r in results if "preempted tier" in r.get("scenario", ""))
    assert preempted["outcome"] == "passed", preempted
    moved = preempted["measurements"]["fast moved"]  # the registered nodes before and after
    before, after = moved.split(" -> ")
    assert before != after, moved


def test_redeploy_changes_nothing(slurm_lab):
    result = invoke("deploy.fast", "deploy.reasoning", "deploy.gateway", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert " changed " not in "\n".join(line for line in result.stdout.splitlines() if not line.startswith(("┃", "│")))


def test_stop_is_clean_within_the_grace_time(slurm_lab, ssh):
    started = time.monotonic()
    result = invoke("stop.fast", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10 + 15  # grace_seconds of the lab's tiers, plus SSH and polling
    assert ssh.run(HEAD, "squeue -h -n llama-fast").stdout.strip() == ""
    assert not ssh.run(HEAD, "test -e /cluster/shared/ai/endpoints/fast.json").ok, "record left behind"
    log = ssh.run(HEAD, "cat /cluster/shared/ai/logs/llama-fast-*.log").stdout
    assert "SIGTERM (preemption or scancel), shutting down" in log
    assert invoke("deploy.fast", cluster=SLURM_LAB).returncode == 0
    record = json.loads(ssh.run(HEAD, "cat /cluster/shared/ai/endpoints/fast.json").stdout)
    assert record["tier"] == "fast" and record["port"] == 8180


def test_a_cancelled_rpc_job_stops_its_head_before_its_workers(slurm_lab, ssh):
    """Issue 31: scancel (like a preemption) signals every step of the job at once, and SLURM may end the batch script
    at once. Each worker step's guard ignores the signal until its head has closed the connection, so the head stops
    cleanly (before the guard, it aborted with a backtrace as its workers vanished); then the guard kills the worker
    and the job leaves the queue without waiting for SLURM's KillWait."""
    job = ssh.run(HEAD, "squeue -h -n llama-reasoning -t R -o %i").stdout.strip()
    assert job, "no reasoning job"
    started = time.monotonic()
    try:
        assert ssh.run(HEAD, f"scancel {job}").ok
        while ssh.run(HEAD, f"squeue -h -j {job} 2>/dev/null").stdout.strip() and time.monotonic() - started < 40:
            time.sleep(0.5)
        left = time.monotonic() - started
        logs = "/cluster/shared/ai/logs/llama-reasoning-" + job
        if left >= 10:  # not after KillWait (30 s): say what SLURM and the job script did meanwhile
            said = ssh.run(HEAD, f"grep -h 'JobId={job}\\b' /var/log/slurm/slurmctld.log | tail -n 20; "
                                   f"tail -n 20 {logs}.log; tail -n 5 {logs}-*.log").stdout
            pytest.fail(f"job {job} left the queue {left:.0f} s after scancel\n{said}")
        head = ssh.run(HEAD, f"cat {logs}-head.log").stdout
        assert "cleaning up before exit" in head, head[-2000:]
        assert "GGML_ASSERT" not in head and "libc.so" not in head, head[-2000:]  # no abort, no backtrace
        log = ssh.run(HEAD, f"cat {logs}.log").stdout
        assert "Aborted" not in log, log[-2000:]
        assert "restart 1 of" not in log, log[-2000:]  # the supervisor asked SLURM: a cancel is no crash
        # each worker ended by its guard: 143 when the job script stopped it after the head, 137 when SLURM's
        # signal reached the guard first (the head's guard ends with 143 too, on slab1)
        assert len(re.findall(rf"(?:{SLAB2}|{SLAB3}): task 0: Exited with exit code 1(?:37|43)", log)) == 2, log[-2000:]
    finally:
        assert invoke("deploy.reasoning", cluster=SLURM_LAB).returncode == 0


@pytest.mark.second_slurm_lab
def test_a_job_cancelled_with_a_request_in_flight_leaves_the_queue_at_once(slurm_lab, ssh):
    """llama-server stops at once on SIGTERM when idle, but with a request in flight it waits for that request; the
    job, already cancelled, then stayed COMPLETING until SLURM's KillWait (32 s here). The server step's guard sends
    the second SIGTERM that makes it exit at once."""
    job = ssh.run(HEAD, "squeue -h -n llama-reasoning -t R -o %i").stdout.strip()
    assert job, "no reasoning job"
    request = threading.Thread(target=ssh.run, daemon=True, args=(
        HEAD, f"curl -s -o /dev/null -m 30 http://{HEAD_IP}:8181/completion "
                "-d '{\"prompt\": \"hello\", \"n_predict\": 1500, \"ignore_eos\": true}'"))
    request.start()
    logs = "/cluster/shared/ai/logs/llama-reasoning-" + job
    try:
        deadline = time.monotonic() + 10
        while "processing task" not in ssh.run(HEAD, f"tail -n 3 {logs}-head.log").stdout:
            assert time.monotonic() < deadline, "the request never reached the head"
            time.sleep(0.2)
        started = time.monotonic()
        assert ssh.run(HEAD, f"scancel {job}").ok
        while ssh.run(HEAD, f"squeue -h -j {job} 2>/dev/null").stdout.strip() and time.monotonic() - started < 40:
            time.sleep(0.5)
        left = time.monotonic() - started
        head = ssh.run(HEAD, f"cat {logs}-head.log").stdout
        # without the guard a waiting server keeps the job COMPLETING for KillWait (32 s): this fails; with it, the
        # log mostly shows its second SIGTERM ("Received second interrupt"), but at times llama-server ends on the
        # first with a request in flight (its HTTP thread and the terminated queue race: 1 of 26 CI runs)
        assert left < 10, f"job {job} left the queue {left:.0f} s after scancel\n{head[-1500:]}"
    finally:
        request.join(30)
        assert invoke("deploy.reasoning", cluster=SLURM_LAB).returncode == 0


def test_status_shows_jobs_nodes_and_endpoints(slurm_lab):
    result = invoke("status", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stderr
    assert "SLURM jobs" in result.stdout
    for job in ("llama-fast", "llama-reasoning"):
        row = next(line for line in result.stdout.splitlines() if line.startswith(f"│ {job} "))
        assert "RUNNING" in row and f"http://{HEAD_IP.rsplit('.', 1)[0]}." in row, row


@pytest.mark.second_slurm_lab
def test_another_users_job_named_like_a_tier_changes_nothing(slurm_lab, ssh):
    """Issue 64: a job name is anyone's. Another user's held job named llama-fast used to answer the keeper's
    `squeue -n`, and the fast tier, cancelled, stayed down until that job went (91 s here). Now the tier's jobs are
    its own by recorded id and user: the keeper submits it again at once, stop and deploy leave that job alone, and
    status names it."""
    tier = load_cluster(SLURM_LAB).tier("fast")
    assert ssh.run(HEAD, "id mallory >/dev/null 2>&1 || useradd -M -s /bin/bash mallory").ok
    held = ssh.run(HEAD, "su mallory -c 'cd /tmp && sbatch --parsable -J llama-fast -p ai --hold --wrap true'")
    assert held.ok and held.stdout.strip().isdigit(), held.tail()
    theirs = held.stdout.strip()
    try:
        own = ssh.run(HEAD, "/usr/local/sbin/clusterbook-jobs squeue fast").stdout.split()
        assert own and theirs not in own, own
        started = time.monotonic()
        assert ssh.run(HEAD, "/usr/local/sbin/clusterbook-jobs cancel fast --wait 30").ok  # as a crash would
        limit = 2 * tier.slurm.keeper_interval_s + 15  # two keeper passes and the job's start
        while True:
            state = ssh.run(HEAD, "/usr/local/sbin/clusterbook-jobs squeue fast -o %T").stdout.split()
            if state and state[0] in ("PENDING", "RUNNING", "CONFIGURING"):
                break
            assert time.monotonic() - started < limit, f"fast not submitted again within {limit} s of its cancel"
            time.sleep(1)
        journal = ssh.run(HEAD, "journalctl -t clusterbook-keeper -n 5 --no-pager").stdout
        assert f"not its own, left alone: job {theirs} mallory PENDING" in journal, journal
        status = invoke("status", cluster=SLURM_LAB)
        assert status.returncode == 0 and f"job {theirs} mallory" in status.stdout, status.stdout[-2000:]
        assert invoke("stop.fast", cluster=SLURM_LAB).returncode == 0
        assert ssh.run(HEAD, f"squeue -h -j {theirs} -o '%u %T'").stdout.split() == ["mallory", "PENDING"]
        assert not ssh.run(HEAD, "/usr/local/sbin/clusterbook-jobs squeue fast").stdout.strip()
    finally:
        assert invoke("deploy.fast", cluster=SLURM_LAB).returncode == 0
        assert ssh.run(HEAD, f"squeue -h -j {theirs} -o %u").stdout.strip() == "mallory"  # still untouched
        ssh.run(HEAD, f"scancel {theirs}")


@pytest.mark.second_slurm_lab
def test_while_a_vasp_like_job_holds_every_node_deploy_waits_and_nothing_pages(slurm_lab, ssh, tmp_path):
    """Issue 64: a job of the higher-priority partition on all three nodes (VASP's, on beefcake2) preempts both tiers,
    as it should. Deploy then ends waiting (exit status 3, naming the holder) at once: it failed after 309 s before.
    An apply of a change meanwhile keeps it, waiting (exit 3, no rollback, the pending job runs the new script).
    Only the informational TierWaitingForNodes fires, never a critical alert; both tiers serve again soon after the
    job ends (the file's own script deployed again after it)."""
    from clusterbook.pure.layout import sbatch_path
    from clusterbook.pure.render.artifacts import render_artifacts
    from clusterbook.pure.slurmjob import script_digest

    assert ssh.run(HEAD, "id mallory >/dev/null 2>&1 || useradd -M -s /bin/bash mallory").ok
    held = ssh.run(HEAD, "su mallory -c 'cd /tmp && sbatch --parsable -J vasp-relax -p vasp -N3 --exclusive "
                            "--time=10 --wrap \"sleep 600\"'")
    assert held.ok and held.stdout.strip().isdigit(), held.tail()
    vasp = held.stdout.strip()
    jobs = "/usr/local/sbin/clusterbook-jobs"
    try:
        deadline = time.monotonic() + 60
        while ssh.run(HEAD, f"{jobs} squeue fast -o %T; {jobs} squeue reasoning -o %T").stdout.split() \
                != ["PENDING", "PENDING"]:
            assert time.monotonic() < deadline, "the tiers were not preempted within 60 s"
            time.sleep(1)
        started = preempted = time.monotonic()
        deployed = invoke("deploy.fast", "deploy.reasoning", cluster=SLURM_LAB)
        assert deployed.returncode == 3, deployed.stdout[-3000:] + deployed.stderr
        assert time.monotonic() - started < 60 and "waiting" in deployed.stdout, deployed.stdout[-2000:]
        assert f"job {vasp} (vasp-relax, user mallory, partition vasp)" in deployed.stdout.replace("\n", " ")
        # apply while the GPUs are VASP's: the change is kept, waiting (exit 3), never rolled back
        changed = tmp_path / SLURM_LAB.name  # the same file name: the same cluster file, edited
        changed.write_text(SLURM_LAB.read_text().replace(
            "    slurm: {partition: ai, mem: 1G, grace_seconds: 10, requeue: false, gres: null, keeper_interval_s: 3}",
            "    slurm: {partition: ai, mem: 1G, grace_seconds: 11, requeue: false, gres: null, keeper_interval_s: 3}",
            1))
        applied = invoke("apply", "--tier", "fast", cluster=changed)
        assert applied.returncode == 3, applied.stdout[-3000:] + applied.stderr[-2000:]
        said = applied.stdout + applied.stderr
        assert "kept, not rolled back" in said and "rolling back" not in said, said[-3000:]
        [phase] = latest_change(NAME)["phases"]
        assert phase["outcome"] == "waiting" and not phase.get("rollback"), phase
        edited = load_cluster(changed)
        digest = script_digest(next(a for a in render_artifacts(edited)
                                    if a.path == sbatch_path(edited, edited.tier("fast"))).text)
        assert ssh.run(HEAD, f"{jobs} squeue fast -o %k").stdout.split() == [digest]  # pending with the new script
        checked = invoke("verify", "--only", "is healthy and lists its models", cluster=SLURM_LAB)
        assert checked.returncode == 3, checked.stdout[-3000:] + checked.stderr[-2000:]  # waiting, not failed
        c = load_cluster(SLURM_LAB)  # past the longest `for:` of the down alerts, and the probe's and scrapes' lag,
        # counted from the preemption (the tiers were down from then: the deploy, apply and verify above ran inside it)
        past = max(c.recovery_level(t.name).critical for t in c.tiers) + c.monitoring.probe_interval_s \
            + 4 * c.monitoring.scrape_interval_s
        time.sleep(max(0.0, past - (time.monotonic() - preempted)))
        out = ssh.run(HEAD, "curl -sfG localhost:9090/api/v1/query --data-urlencode 'query=ALERTS{alertstate="
                               "\"firing\"}' | jq -r '.data.result[].metric | \"\\(.alertname) \\(.severity)\"'")
        firing = set(out.stdout.split("\n")) - {""}
        assert firing == {"TierWaitingForNodes info"}, firing
    finally:
        ssh.run(HEAD, f"scancel {vasp}")
    deadline = time.monotonic() + 60
    while not ssh.run(HEAD, "test -e /cluster/shared/ai/endpoints/fast.json && "
                               "test -e /cluster/shared/ai/endpoints/reasoning.json").ok:
        assert time.monotonic() < deadline, "the tiers were not back within 60 s of the VASP-like job's end"
        time.sleep(1)
    back = invoke("deploy.fast", cluster=SLURM_LAB)  # the file's own script again, for the tests after this one
    assert back.returncode == 0, back.stdout[-2000:] + back.stderr


def test_bench_recovery_under_slurm(slurm_lab, tmp_path):
    """A killed worker step is started again inside the job (which never leaves RUNNING); a cancelled job is
    submitted again by the keeper: both come back through the gateway, timed (the new job from the old one leaving
    and the new one running), with the load from the head step's own log."""
    result = invoke("bench.recovery", "--runs", "1", cluster=SLURM_LAB, timeout=900,
                    extra_env={"INVOKE_CLUSTERBOOK_REPORTS": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    report = json.loads((tmp_path / "bench-recovery.json").read_text())
    assert [r["case"] for r in report["runs"]] == ["worker killed", "head restarted"]
    assert report["predicted"]["restart"] == "step restart in the job"
    killed, requeued = report["runs"]
    assert list(killed["phases"]) == ["first answer"], killed  # the job kept running throughout
    assert sorted(requeued["phases"], key=requeued["phases"].get) == ["job left running", "job running",
                                                                       "first answer"], requeued
    # the tier's job is not requeueable (D21 in the lab too): scancel, and the keeper submits it again within its
    # interval, with no requeue hold
    assert report["predicted"]["new_job"] == "keeper resubmission"
    assert requeued["phases"]["job running"] - requeued["phases"]["job left running"] <= 10 + 5, requeued
    for r in report["runs"]:
        assert r["load_s"] is not None and r["load_s"] > 0, r


def test_the_api_pages_examples_run_against_the_slurm_lab(slurm_lab, ssh, tmp_path):
    """Through the gateway, as the SLURM lab's API page shows them."""
    outputs = run_api_examples(SLURM_LAB, tmp_path, ssh)
    assert len(outputs) == 4
    for out in outputs:
        assert '"chat.completion' in out and '"error"' not in out, out[:500]


def test_docs_publish_serves_the_site_from_the_gateway(slurm_lab):
    """The site lands on the gateway's docs port and under /docs/ of its path port (as tailscale serve publishes
    it); its footer names this cluster file's digest and this build; a real browser loads the published copy."""
    import re

    from clusterbook.commands.reportstamp import file_digest

    result = invoke("docs.publish", cluster=SLURM_LAB)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    built = re.search(r"at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)", result.stdout.replace("\n", " ")).group(1)
    shown = SLURM_LAB.relative_to(ROOT)  # the twin's file is in .clusterbook/
    footer = f"Built by clusterbook from {shown} (sha256 {file_digest(SLURM_LAB)[:12]}) at {built}"
    for url in (f"http://{HEAD_IP}:8095/", f"http://{HEAD_IP}:8090/docs/", f"http://{HEAD_IP}:8090/docs/api/"):
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and footer in page.text, (url, page.status_code)
    again = invoke("docs.publish", cluster=SLURM_LAB)  # a second publish swaps in the new build, keeps the old
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert footer not in httpx.get(f"http://{HEAD_IP}:8095/", timeout=10).text
    browse_published(f"http://{HEAD_IP}:8090/docs/")


def browse_published(url: str) -> None:
    """Headless Chromium on the published copy: the page renders with its navigation and the API tabs switch."""
    import shutil
    import tempfile

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("apt-get install chromium chromium-driver")
    import os
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tempfile.mkdtemp()}",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    try:
        driver.get(url)
        assert driver.find_element(By.CSS_SELECTOR, "article h1").text == NAME
        assert "Built by clusterbook" in driver.find_element(By.CSS_SELECTOR, "footer").text
        driver.get(url + "api/")
        tabs = driver.find_element(By.CSS_SELECTOR, ".tabbed-set")
        tabs.find_element(By.XPATH, ".//label[normalize-space()='Python (openai)']").click()
        WebDriverWait(driver, 5).until(lambda d: any("from openai import OpenAI" in b.text for b in
                                                     tabs.find_elements(By.CSS_SELECTOR, ".tabbed-block")
                                                     if b.is_displayed()))
        assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()


def test_apply_rolls_a_bad_change_back_and_resubmits_the_previous_script(slurm_lab, tmp_path):
    """A change whose model no node holds fails its scenarios and is rolled back; clients through the gateway
    (bench.faults' own, half streaming) all the while: the gateway holds their requests through the change
    (issue 46), none fails."""
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.layout import sbatch_path
    from clusterbook.pure.render.artifacts import render_artifacts
    from clusterbook.pure.slurmjob import script_digest

    cluster = load_cluster(SLURM_LAB)
    script = next(a for a in render_artifacts(cluster) if a.path == sbatch_path(cluster, cluster.tier("reasoning")))
    bad = tmp_path / SLURM_LAB.name  # the same file name: the same cluster file, edited
    bad.write_text(with_missing_model(SLURM_LAB.read_text()))
    applied = []
    clients = clients_through(cluster, "reasoning", "bad apply rolled back",
                              lambda: applied.append(invoke("apply", "--tier", "reasoning", cluster=bad)))
    print(json.dumps(clients.to_json()))
    assert clients.failed == [], clients.to_json()  # issue 46: the gateway holds them through the change
    [run] = applied
    assert run.returncode == 1, run.stdout[-4000:]
    assert "rolled back at reasoning" in run.stderr and "left the queue" in run.stderr, run.stderr[-3000:]
    [phase] = latest_change(NAME)["phases"]
    assert phase["outcome"] == "rolled back" and phase["rollback"]["answered"], phase
    restored = [f for r in phase["rollback"]["restored"] for f in r["files"]]
    assert script.path in restored, restored
    assert phase["rollback"]["seconds"] <= 150, phase["rollback"]  # reasoning's recovery critical in this file
    again = next(r for r in phase["scenarios"] if r["when"] == "after rollback")
    assert again["passed"] and not again["failed"], again
    status = invoke("status", cluster=SLURM_LAB)
    assert script_digest(script.text) in status.stdout, status.stdout  # the job runs the previous script again


@pytest.mark.second_slurm_lab
def test_the_solvers_placement_is_deployed_and_every_tier_answers_at_once(slurm_lab, tmp_path):
    """Issue 30 on the lab: fast asks SLURM for 3G of a node's 4 GB, so beside reasoning on all three nodes one of
    them waits in the queue. `plan --solve` finds reasoning on two nodes; its diff, applied with patch, is deployed
    (reasoning first, as the plan orders) and both tiers answer concurrent requests."""
    apart = tmp_path / SLURM_LAB.name
    apart.write_text(SLURM_LAB.read_text().replace("mem: 1G,", "mem: 3G,", 1))  # the first: fast's
    written = json.loads(invoke("plan", "--json", cluster=apart).stdout)["cluster"]
    assert [e["tiers"] for e in written["exclusions"]] == [["fast", "reasoning"]], written["exclusions"]

    solved = json.loads(invoke("plan", "--solve", "--json", cluster=apart).stdout)
    assert not solved["current"]["serving_together"] and solved["placements"][0]["serving_together"], solved
    patched = subprocess.run(["patch", str(apart)], input=solved["diff"], capture_output=True, text=True)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    plan = json.loads(invoke("plan", "--json", cluster=apart).stdout)["cluster"]
    assert plan["exclusions"] == [] and plan["groups"] == [["fast", "reasoning"]], plan

    assert invoke("stop.fast", "stop.reasoning", cluster=SLURM_LAB).returncode == 0
    try:
        run = invoke("deploy.reasoning", "deploy.fast", "deploy.gateway", cluster=apart)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr
        result = invoke("verify", "--only", "same time", cluster=apart)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr
        assert "1 passed" in result.stdout, result.stdout[-2000:]
    finally:
        invoke("stop.fast", "stop.reasoning", cluster=apart)
        again = invoke("deploy.fast", "deploy.reasoning", "deploy.gateway", cluster=SLURM_LAB)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr


@pytest.mark.second_slurm_lab
def test_a_tier_on_demand_is_released_when_idle_and_started_by_its_first_request(slurm_lab, tmp_path):
    """Issue 33 on the lab: reasoning on demand (released after 5 s idle). The scenarios wait for the release each
    time: the first request is answered within 25 % of the predicted cold start, ten concurrent first requests start
    one job and are all answered, and a request that waits past the cap (the partition down) gets 503 with
    Retry-After. bench.faults releases it under its clients: none of their requests fails. A deploy of the
    released tier changes its files and starts nothing."""
    demand = tmp_path / SLURM_LAB.name
    text = SLURM_LAB.read_text()
    line = "    keep_weights_s: 60"  # the reasoning tier's (its last setting)
    assert text.count(line) == 1, "the SLURM lab's tiers changed: update this test"
    demand.write_text(text.replace(line, "    on_demand: {idle_s: 5}\n" + line))
    try:
        run = invoke("deploy.gateway", "deploy.reasoning", cluster=demand)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr
        result = invoke("verify", "--only", "Tiers on demand", cluster=demand, timeout=600)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr
        assert "3 passed" in result.stdout, result.stdout[-2000:]
        # issue 46: clients through the gateway stop, the tier is released as its keeper releases it, and their
        # next requests wake it: none fails
        no_request_fails_through(demand, "released", tmp_path / "reports")
        status = invoke("status", cluster=demand)
        assert status.returncode == 0 and "on demand" in status.stdout, status.stdout[-2000:]
        released = time.monotonic()
        while "released" not in invoke("status", cluster=demand).stdout and time.monotonic() - released < 60:
            time.sleep(3)
        again = invoke("deploy.reasoning", cluster=demand)  # released: files change, nothing starts
        assert again.returncode == 0 and "released on demand" in again.stdout, again.stdout[-2000:]
        assert invoke("status", cluster=demand).stdout.count("released") >= 1
    finally:
        back = invoke("deploy.gateway", "deploy.reasoning", cluster=SLURM_LAB)
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr


def test_a_killed_worker_step_costs_the_gateways_clients_no_request(slurm_lab, tmp_path):
    """Issue 46: bench.faults' clients through the gateway while a worker step is killed. The request in flight (its
    head aborts) and every request while the job starts its steps again are held by the gateway's hold service and
    answered once the tier is back: none fails."""
    no_request_fails_through(SLURM_LAB, "worker killed", tmp_path)


def test_past_its_slots_and_queue_a_request_gets_429_at_once(slurm_lab, tmp_path):
    """Issue 46, as `invoke bench.faults --fault overload` measures it: more requests at once than a tier's slots and
    queue (gateway.queue_per_slot); the excess gets 429 with Retry-After from nginx at once, never a timeout, and
    every admitted one is answered. (The 50 ms target is the benchmark's figure; here: under a second.)"""
    result = invoke("bench.faults", "--tier", "reasoning", "--fault", "overload", cluster=SLURM_LAB, timeout=600,
                    extra_env={"INVOKE_CLUSTERBOOK_REPORTS": str(tmp_path)})
    print(result.stdout[-2000:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    overload = json.loads((tmp_path / "bench-faults.json").read_text())["overload"]
    assert overload["refused"] >= 20 and overload["failed"] == [], overload
    assert overload["refused_ms"]["max"] < 1000, overload
    assert overload["gateway_ms"]["max"] is not None, overload  # nginx said how long it took (its own header)


EMBED_TIER = f"""  - name: embed
    kind: embeddings
    description: Embeddings of the small model on {SLAB3}, in a partition of its own.
    manager: slurm
    node: {SLAB3}
    port: 8182
    model: lab-fast-a
    ctx_size: 512
    batch_size: 256
    ubatch_size: 256
    threads: 1
    slurm: {{partition: embed, mem: 1G, grace_seconds: 10, requeue: false, gres: null, keeper_interval_s: 3}}
"""


def with_embeddings_tier(path: Path) -> Path:
    """The SLURM lab with an embeddings tier on slab3 in a partition of its own, behind the gateway at /embeddings/.
    Not in the lab's file: its nodes have 2 CPUs each and the reasoning tier asks one on every node, so a third job
    beside the fast tier's left the reasoning tier pending in the preemption scenarios (measured)."""
    text = SLURM_LAB.read_text()
    for anchor in ("\nplanner:", "    - {name: ai, ", "    - {path: /reasoning/"):
        assert text.count(anchor) == 1, f"the SLURM lab's file changed ({anchor!r}): update this test"
    text = text.replace("\nplanner:", EMBED_TIER + "\nplanner:")
    partition = f"    - {{name: embed, nodes: [{SLAB3}], priority_tier: 1, preempt_mode: REQUEUE}}\n"
    text = text.replace("    - {name: ai, ", partition + "    - {name: ai, ")
    text = text.replace("    - {path: /reasoning/", "    - {path: /embeddings/, tier: embed, port: 8087}\n"
                        "    - {path: /reasoning/")
    path.write_text(text)
    return path


@pytest.mark.second_slurm_lab
def test_an_embeddings_tier_runs_as_a_slurm_job_behind_the_gateway(slurm_lab, ssh, tmp_path):
    """Issue 68: the third kind under SLURM. Its job (slurm.conf's new partition first) runs on slab3, registers its
    endpoint, the gateway routes /embeddings/ to it and its scenario passes; stop.embed cancels its own job."""
    embed = with_embeddings_tier(tmp_path / SLURM_LAB.name)
    try:
        stopped = invoke("stop.fast", cluster=SLURM_LAB)  # wherever SLURM put it, slab3 keeps a CPU for embed
        assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr
        run = invoke("deploy.slurm", "deploy.gateway", "deploy.embed", cluster=embed, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr
        result = invoke("verify", "--only", "Embeddings", cluster=embed, timeout=300)
        assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:] + result.stderr
        running = ssh.run(HEAD, "squeue -h -n llama-embed -o '%T %N %P'")
        assert running.stdout.split() == ["RUNNING", SLAB3, "embed"], running.stdout
        gone = invoke("stop.embed", cluster=embed)
        assert gone.returncode == 0, gone.stdout[-2000:] + gone.stderr
        assert ssh.run(HEAD, "squeue -h -n llama-embed").stdout.strip() == ""
    finally:
        back = invoke("deploy.slurm", "deploy.fast", "deploy.gateway", cluster=SLURM_LAB, timeout=600)
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr


def test_every_diagnose_command_of_beefcake2s_troubleshooting_returns_on_the_slurm_lab(slurm_lab, tmp_path):
    """Issue 47 item 2: beefcake2's troubleshooting entries on the SLURM lab's nodes (the same tiers), each read-only
    command run as the Troubleshooting page shows it (`ssh NODE "…"`, through the ssh_config clusterbook writes; an
    `invoke` line with this file configured; the rest on this machine, as on the operator's). Each must end on its
    own within 30 s; any exit status is an answer (a diagnosis may find nothing). Commands that do not render for
    the lab (the site's partitions: the lab has none) are listed, not run."""
    import shlex

    import yaml

    from clusterbook.effects.ssh import ssh_config_path
    from clusterbook.pure.fixsteps import fix_step_commands

    entries = yaml.safe_load(whole_text())["troubleshooting"]
    file = tmp_path / SLURM_LAB.name
    file.write_text(SLURM_LAB.read_text() + "\n" + yaml.safe_dump({"troubleshooting": entries}, sort_keys=False))
    cluster = load_cluster(file)
    config = str(ssh_config_path(cluster, ROOT))
    env = {**os.environ, "INVOKE_CLUSTERBOOK_CLUSTER": str(file)}
    ran, unrendered, hung = [], [], []
    from clusterbook.pure import troubles

    for trouble in troubles.entries(cluster):  # an entry for every tier: each tier's
        for step in (s for s in trouble.fix if not s.act):
            try:
                lines = fix_step_commands(cluster, trouble, step)
            except Exception as exc:
                unrendered.append(f"{trouble.id}: {type(exc).__name__}")
                continue
            for line in lines:
                argv = (["ssh", "-F", config, *shlex.split(line)[1:]] if line.startswith("ssh ")
                        else [sys.executable, "-m", "invoke", *shlex.split(line)[1:]] if line.startswith("invoke ")
                        else ["bash", "-c", line])  # on the operator's machine (hosts: local)
                try:
                    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
                    ran.append((trouble.id, line, done.returncode, (done.stdout + done.stderr).strip()[-300:]))
                except subprocess.TimeoutExpired:
                    hung.append(f"{trouble.id}: {line}")
    print(f"{len(ran)} commands returned; not rendered for the lab: {unrendered}")
    for entry, line, status, err in ran:
        print(f"  {status:3d} {entry}: {line[:100]}{(' | ' + err[-100:]) if status else ''}")
    assert not hung, "commands that did not return within 30 s:\n" + "\n".join(hung)
    assert len(ran) >= 20 and len(unrendered) <= 2, (len(ran), unrendered)
    # each ran where the page says: ssh reached its node (255: it did not), invoke knew the task and ended cleanly
    # (`invoke check` may refuse this file: the entry that does not render here)
    unreached = [r for r in ran if (r[1].startswith("ssh ") and r[2] == 255) or (r[1].startswith("invoke ") and (
        "No idea what" in r[3] or "Traceback" in r[3]))]
    assert not unreached, "\n".join(f"{e}: {line} -> {status}: {err}" for e, line, status, err in unreached)


def test_restore_legacy_brings_the_seeds_setup_back_and_leaves_nothing_of_clusterbooks_running(slurm_lab, ssh):
    """Issue 66 row 2, the last test here (it takes the lab back to before clusterbook): stop.legacy recorded what
    the seeds' setup ran, named or found (a unit, a nohup worker, seed 004's daemon and its job, the updater's timer);
    restore.legacy stops clusterbook's units, jobs and site, and brings that back: the setup serves again, its files
    byte for byte, and no unit or job of clusterbook's runs on any node."""
    record = ssh.run(SLAB3, "cat /var/lib/clusterbook/generations-slurm/legacy/record.json")
    assert record.ok and "rpc-server" in json.loads(record.stdout)["processes"][0]["argv"][0], record.tail()
    run = invoke("restore.legacy", cluster=SLURM_LAB)
    print(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    seeds_setup.serving(ssh)
    assert seeds_setup.digests(ssh) == SEEDS_DIGESTS
    assert ssh.run(HEAD, "systemctl is-active ai-upstream.timer ai-autostart.service").ok
    assert ssh.run(SLAB2, "systemctl is-enabled llama-rpc && systemctl is-active llama-rpc").ok
    ours = ("for u in $(systemctl list-units --no-legend --plain --state=active,activating "
            "--type=service,timer,path | awk '{print $1}'); do f=$(systemctl show -p FragmentPath --value \"$u\"); "
            "[ -n \"$f\" ] && grep -q 'Generated by clusterbook' \"$f\" && echo \"$u\"; done; true")
    for node in (HEAD, SLAB2, SLAB3):
        running = ssh.run(node, ours)
        assert running.ok and not running.stdout.strip(), f"{node}: clusterbook's units run: {running.stdout}"
        assert ssh.run(node, "! test -e /etc/systemd/journald.conf.d/clusterbook.conf").ok  # journald's own limit
    gateway = load_cluster(SLURM_LAB).gateway
    held = ssh.run(HEAD, f"ss -Hltn 'sport = :{gateway.path_port}'; ls {layout.NGINX_SITE_ENABLED}")
    assert not held.stdout.strip(), held.stdout  # clusterbook's site left nginx
    queue = ssh.run(HEAD, "squeue -h -u root -o %j").stdout.split()  # the tiers' jobs are root's here
    assert queue == [seeds_setup.JOB], queue
    again = invoke("restore.legacy", cluster=SLURM_LAB)  # a second run changes nothing
    lines = "\n".join(line for line in again.stdout.splitlines() if not line.startswith(("┃", "│")))
    assert again.returncode == 0 and " changed " not in lines, again.stdout[-2000:]
