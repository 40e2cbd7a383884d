"""bench.faults' measuring, against a small HTTP server on loopback in place of the gateway: requests the "tier"
refuses after the fault are counted as failed, a stream without its end too, and the tier is back when a request
sent after the fault is answered; which faults each tier can be given; latency before and during a fault."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from clusterbook.effects import faults
from clusterbook.effects.console import Failed
from clusterbook.effects.faults import CONTROL, FaultRun, Request, faults_for, run_fault
from clusterbook.model.loader import load_cluster

from .fakeslurm import local_jobs_command
from .test_path_roles import ROOT


class Tier(http.server.BaseHTTPRequestHandler):
    """Answers chat completions; from the fault for `down_s` it answers 503, and a stream then ends early."""

    fault_at: float | None = None
    down_s = 1.0
    model: str | None = None  # a router tier: a request must name one of its models (400 otherwise)
    delay_s = 0.0  # how long each answer takes


    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if Tier.model and body.get("model") != Tier.model:
            self.send_response(400)
            self.end_headers()
            return
        time.sleep(Tier.delay_s)
        down = Tier.fault_at is not None and time.monotonic() - Tier.fault_at < Tier.down_s
        if down and not body["stream"]:
            self.send_response(503)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body["stream"] else "application/json")
        self.end_headers()
        if body["stream"]:
            self.wfile.write(b'data: {"choices": []}\n\n' + (b"" if down else b"data: [DONE]\n\n"))
        else:
            self.wfile.write(b'{"choices": []}')

    def log_message(self, *args):
        pass


@pytest.fixture
def tier():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tier)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Tier.fault_at, Tier.model, Tier.delay_s = None, None, 0.0
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    server.shutdown()


def test_requests_the_tier_refuses_after_the_fault_are_failed_and_it_is_back_once_one_is_answered(tier, monkeypatch):
    monkeypatch.setattr(faults, "BEFORE_S", 0.5)
    monkeypatch.setattr(faults, "disrupt", lambda *args: setattr(Tier, "fault_at", time.monotonic()))
    run = run_fault(None, None, None, "worker killed", tier, None, clients=4, limit_s=10)
    # a refused request shows its status; a stream cut before [DONE] its 200 (the status it began with)
    assert "503" in {r.outcome for r in run.failed} <= {"503", "200"}, run.failed
    assert all(r.sent_s + r.took_s >= 0 for r in run.failed)  # nothing failed before the fault
    assert 1 <= run.back_s <= 2.5, run.back_s
    assert any(r.outcome == "ok" and r.sent_s < 0 for r in run.requests)  # the baseline before the fault
    report = run.to_json()
    assert report["requests"] == len(run.requests) and len(report["failed"]) == len(run.failed)


def test_a_tier_that_never_fails_leaves_nothing_failed(tier, monkeypatch):
    monkeypatch.setattr(faults, "BEFORE_S", 0.3)
    monkeypatch.setattr(faults, "disrupt", lambda *args: None)
    run = run_fault(None, None, None, "head killed", tier, None, clients=2, limit_s=5)
    assert run.failed == [] and run.back_s is not None and run.back_s < 2


def test_latency_outside_and_during_a_fault():
    run = FaultRun("head killed", 2, [Request(-3, False, "ok", 0.5), Request(-2, True, "ok", 1.0),
                                      Request(-0.5, False, "ok", 4.0),  # in flight at the fault
                                      Request(1, False, "ok", 2.0), Request(6, False, "ok", 0.5)], back_s=1)
    assert run.latency(False) == {"p50": 0.75, "p99": 1.0}  # the steady queue's, ended before the fault
    after_only = FaultRun("head killed", 1, [Request(-0.5, False, "ok", 4.0), Request(6, False, "ok", 0.5)], back_s=1)
    assert after_only.latency(False) == {"p50": 0.5, "p99": 0.5}  # none ended before: those sent once it was back
    assert run.latency(True) == {"p50": 3.0, "p99": 4.0}
    assert FaultRun("head killed", 1).latency(True) == {"p50": None, "p99": None}
    assert run.added_p99_s() == 3.0 and FaultRun("head killed", 1).added_p99_s() is None
    assert run.target_met(1.0) == "yes" and run.target_met(0.9) == "no"
    assert FaultRun("head killed", 1).target_met(5) == "no baseline"
    run.requests.append(Request(2, True, "503", 9.0))
    assert run.target_met(100) == "no (failed)"


def test_which_faults_a_tier_can_be_given():
    lab, slurm = load_cluster(ROOT / "lab/cluster.yaml"), load_cluster(ROOT / "lab/cluster-slurm.yaml")
    assert faults_for(lab, lab.tier("reasoning")) == (CONTROL, "worker killed", "head killed", "overload")
    assert faults_for(slurm, slurm.tier("reasoning")) == (CONTROL, "worker killed", "head killed", "job ended",
                                                          "overload")
    # a single-node tier can move: its preemption by the partition above it (the lab's vasp) is a fault it is given
    assert faults_for(slurm, slurm.tier("fast")) == (CONTROL, "head killed", "job ended", "preempted", "overload")
    beefcake2 = load_cluster(ROOT / "cluster.yaml")  # SLURM managed by the site: no preemptor of clusterbook's
    assert "preempted" not in faults_for(beefcake2, beefcake2.tier("fast"))


@pytest.mark.parametrize("disruption_fails", [False, True])
def test_a_preemption_is_ended_after_the_run_also_when_the_disruption_fails(tier, monkeypatch, disruption_fails):
    """The higher-priority job goes once the tier answered again (and its clients stopped); where submitting it
    failed, scancel still runs: no node stays taken from the tiers."""
    events = []

    def disrupt(*args):
        events.append("preempted")
        if disruption_fails:
            raise Failed("lab1: preempted: sbatch exited 1")

    monkeypatch.setattr(faults, "BEFORE_S", 0.3)
    monkeypatch.setattr(faults, "disrupt", disrupt)
    monkeypatch.setattr(faults, "end_preemption", lambda c, transport: events.append("ended"))
    Tier.model = "lab-fast-a"  # a router tier (the one a preemption moves): the clients name its model
    if disruption_fails:
        with pytest.raises(Failed):
            run_fault(None, None, None, "preempted", tier, None, clients=2, limit_s=5, model="lab-fast-a")
    else:
        run = run_fault(None, None, None, "preempted", tier, None, clients=2, limit_s=5, model="lab-fast-a")
        assert run.back_s is not None and run.failed == []
    assert events == ["preempted", "ended"]
    monkeypatch.setattr(faults, "disrupt", lambda *args: None)
    run_fault(None, None, None, "head killed", tier, None, clients=2, limit_s=5, model="lab-fast-a")
    assert events == ["preempted", "ended"]  # only a preemption is ended


def test_the_control_does_nothing_to_the_tier_and_measures_the_same_way(tier, monkeypatch):
    monkeypatch.setattr(faults, "BEFORE_S", 0.3)
    monkeypatch.setattr(faults, "disrupt", lambda *args: pytest.fail("the control disrupted the tier"))
    Tier.model = "lab-fast-a"
    run = run_fault(None, None, None, CONTROL, tier, None, clients=2, limit_s=5, model="lab-fast-a")
    assert run.back_s is not None and run.failed == [] and run.latency(False)["p99"] is not None


def test_a_release_is_done_while_no_request_is_in_flight_and_the_clients_wake_the_tier(tier, monkeypatch):
    """A tier on demand is released only when idle: the clients stop sending, the last answers come, then the
    release; the next requests are the ones that wake it (the fake tier answers 503 to a non-stream request for its
    first 3 s after the release: counted failed, as a wake the gateway did not hold would be; 1 s was too short for
    the clients' next requests to arrive in on a loaded 2-core CI machine, 2026-12-02)."""
    monkeypatch.setattr(faults, "BEFORE_S", 0.75)  # the clients' second requests are in flight then (0.6-1.0 s)
    monkeypatch.setattr(Tier, "down_s", 3.0)
    monkeypatch.setattr(faults, "release", lambda *args: setattr(Tier, "fault_at", time.monotonic()))
    Tier.delay_s = 0.4
    run = run_fault(None, None, None, "released", tier, None, clients=4, limit_s=10)
    before = [r for r in run.requests if r.sent_s < 0]
    assert before and all(r.sent_s + r.took_s <= 0.05 for r in before)  # all answered before the release
    assert run.back_s is not None and run.failed  # the fake tier does not hold: its 503s are counted


def test_a_tier_on_demand_can_be_released():
    c = load_cluster(ROOT / "cluster.yaml")
    assert faults_for(c, c.tier("reasoning"))[-2:] == ("released", "overload")  # on demand (D23)
    assert "released" not in faults_for(c, c.tier("fast"))


class Gate(http.server.BaseHTTPRequestHandler):
    """A tier behind a gateway that admits `limit` requests at once (each takes 1.5 s, longer than a loaded machine
    takes to release every thread from the barrier); beyond, 429 at once, with Retry-After where `retry_after`
    says. How fast is the benchmark's to say (bench.faults on the lab), not this test's."""

    limit, busy, lock, retry_after = 2, 0, threading.Lock(), True

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with Gate.lock:
            admitted = Gate.busy < Gate.limit
            Gate.busy += admitted
        if not admitted:
            self.send_response(429)
            if Gate.retry_after:
                self.send_header("Retry-After", "1")
            self.send_header("X-Clusterbook-Gateway-Time", "0.001")  # as nginx's $request_time writes it
            self.end_headers()
            return
        time.sleep(1.5)
        with Gate.lock:
            Gate.busy -= 1
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"choices": []}')

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("retry_after", [True, False])
def test_overload_counts_the_prompt_429s_and_fails_one_without_retry_after(retry_after):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gate)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Gate.busy, Gate.retry_after = 0, retry_after
    try:
        run = faults.run_overload(f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions", None,
                                  admitted=2, extra=5, model=None, timeout_s=10)
    finally:
        server.shutdown()
    report = run.to_json()
    assert report["sent"] == 7 and report["refused"] == 5 and report["refused_ms"]["max"] is not None, report
    assert report["gateway_ms"] == {"p50": 1.0, "p99": 1.0, "max": 1.0}, report
    assert (report["failed"] == []) == retry_after, report


def test_a_router_tiers_head_is_killed_where_its_slurm_job_runs_now():
    """After a preemption the lab's fast tier runs on another node than the file names: the kill goes there."""
    from clusterbook.effects.recovery import disrupt
    from clusterbook.effects.transport import Result

    slurm = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    fast = slurm.tier("fast")
    ran = []

    class Nodes:
        def run(self, host, command, timeout=120, stdin=None):
            ran.append((host, command))
            out = "slab3\n" if "clusterbook-jobs squeue" in command else "1764400000.5\n"
            return Result(host, command, 0, out, "")

    assert disrupt(slurm, Nodes(), fast, "head killed") == 1764400000.5
    assert ran[0][0] == slurm.slurm_controller and "clusterbook-jobs squeue fast -t RUNNING" in ran[0][1]
    assert ran[1][0] == "slab3" and f"--port {fast.port}'" in ran[1][1] and fast.node != "slab3"


def test_a_preemption_is_timed_from_when_slurm_ends_the_tiers_job(tmp_path):
    """SLURM may take half a minute to preempt: the fault's time is when the tier's job left RUNNING, not the
    preemptor's submission (clients measured from the submission saw the tier answer and the run end first)."""
    import os
    import subprocess

    from clusterbook.effects.recovery import disrupt
    from clusterbook.effects.transport import Result

    slurm = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    local = local_jobs_command(tmp_path, slurm, {"fast": ["123"]})
    polls = tmp_path / "polls"
    (tmp_path / "squeue").write_text(  # the job runs on slab2 for three polls after the preemptor's submission
        "#!/bin/bash\ncase \"$*\" in *-n*) printf '123\\037root\\037123 slab2\\n';; *'-j 123'*) "
        "n=$(cat %s 2>/dev/null || echo 0); echo $((n + 1)) > %s; [ $n -lt 3 ] && echo 123;; esac\n" % (polls, polls))
    (tmp_path / "sbatch").write_text(f"#!/bin/bash\necho \"$*\" > {tmp_path}/sbatch.args\necho 999\n")
    for name in ("squeue", "sbatch"):
        (tmp_path / name).chmod(0o755)

    class Controller:
        def run(self, host, command, timeout=120, stdin=None):
            done = subprocess.run(["bash", "-c", local(command)], capture_output=True, text=True,
                                  env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
            return Result(host, command, done.returncode, done.stdout, done.stderr)

    started = time.time()
    at = disrupt(slurm, Controller(), slurm.tier("fast"), "preempted")
    assert polls.read_text().strip() == "4" and at - started >= 1.4  # three polls 0.5 s apart saw it still running
    assert "-w slab2 --exclusive" in (tmp_path / "sbatch.args").read_text()


@pytest.mark.parametrize("answer, released", [('{"released": true}', True),
                                              ('{"released": false, "why": "not serving"}', True),
                                              ('{"released": false, "why": "in flight: 1"}', False)])
def test_the_release_fault_takes_a_tier_its_keeper_released_first_as_released(tmp_path, monkeypatch, answer, released):
    """The release fault asks the wake service to release the idle tier, then cancels its job. Where the clients were
    quiet past the tier's idle time, its keeper released it first and the service answers "not serving": the same
    fault (the SLURM lab's CI once failed on that race). A tier with a request in flight is never released. The
    command runs for real with bash, with fakes of curl, scancel and squeue on PATH (no sleeps: `sleep` is faked)."""
    from clusterbook.effects.transport import LocalTransport

    gone = tmp_path / "cancelled"  # the fake queue holds the tier's job 123 until it is cancelled
    for name, body in (("curl", f"echo '{answer}'"), ("scancel", f"printf '%s\\n' \"$*\" >> {gone}"),
                       ("squeue", f"test -e {gone} || printf '123\\037root\\037123\\n'"), ("sleep", "true")):
        (tmp_path / name).write_text(f"#!/bin/bash\n{body}\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    tier = c.tier("reasoning")
    local = local_jobs_command(tmp_path, c, {"reasoning": ["123"]})

    class Local(LocalTransport):
        def run(self, host, command, **kwargs):
            return super().run(host, local(command), **kwargs)
    if released:
        faults.release(c, Local(), tier, limit_s=5)
        assert gone.read_text() == "--user=root 123\n"  # its own job, by id and user
    else:
        with pytest.raises(Failed, match="did not release it"):
            faults.release(c, Local(), tier, limit_s=5)
        assert not (tmp_path / "cancelled").exists()
