"""The step supervisor (clusterbook/node/step_supervisor.sh), the body of every SLURM tier job, run here with fakes of
srun and scontrol and two small programs in place of an RPC worker and llama-server: the order it starts and stops
steps in, a crashed step started again inside the job, a step SLURM ended not restarted, restarts bounded, a lost node
given up on; its questions to SLURM table-driven. The last test measures which of its lines these tests ran (bash's
xtrace): at least 90 %."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import clusterbook.node

PROGRAM = Path(clusterbook.node.__file__).parent / "step_supervisor.sh"
TRACED: set[int] = set()  # the supervisor's lines the tests below ran

SRUN = r"""#!/bin/bash
# srun as a job step runs: its options read, the command run here with its output in the step's log
out=/dev/null node=
while [ $# -gt 0 ]; do
    case $1 in --output=*) out=${1#--output=} ;; --nodelist=*) node=${1#--nodelist=} ;; --*) ;; *) break ;; esac
    shift
done
echo "$node $4" >>"$FAKE_DIR/srun.log"
exec "$@" >>"$out" 2>&1
"""
SCONTROL = r"""#!/bin/bash
# scontrol: `show job|node -o X` prints $FAKE_DIR/job or node-X (absent: the controller does not answer); requeue noted
case "$1 $2" in
    "show job") cat "$FAKE_DIR/job" 2>/dev/null ;;
    "show node") cat "$FAKE_DIR/node-$4" 2>/dev/null ;;
    requeue*) echo "$2" >>"$FAKE_DIR/requeued" ;;
esac
"""
WORKER = """import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
open(sys.argv[2], "w").write(str(os.getpid()))
while True:
    s.accept()[0].close()
"""
SERVER = """import http.server, os, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
open(sys.argv[2], "w").write(str(os.getpid()))
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One tier job on this machine: a worker and a head (fakes), the supervisor in a bash of its own, traced."""

    def __init__(self, tmp: Path, worker: str = "", restarts: int = 3, grace: int = 10, requeue: int = 0):
        self.dir = tmp
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name, text in {"srun": SRUN, "scontrol": SCONTROL}.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        (tmp / "worker.py").write_text(WORKER)
        (tmp / "server.py").write_text(SERVER)
        self.wport, self.hport = free_port(), free_port()
        worker = worker or f"python3 {tmp}/worker.py {self.wport} {tmp}/worker.pid"
        self.record = tmp / "registry" / "t.json"
        (tmp / "harness.sh").write_text(f"""set -uo pipefail
TIER=t REGISTRY={tmp}/registry RECORD={self.record} HTTP_ADDR=127.0.0.1 HTTP_PORT={self.hport}
GRACE={grace} REQUEUE={requeue} STEP_RESTARTS={restarts} HEAD=1 WORKERS=(0) ENDPOINTS=(127.0.0.1:{self.wport})
RPC_PORT={self.wport} CPUS=2 STEP_LOG={tmp}/t-1 BACKOFF_S=0 LISTEN_S=3 SIGNAL_WAIT_S=1
step_0() {{ start_worker 0 rpc-worker-a a {worker}; }}
step_1() {{ start_server 1 head a python3 {tmp}/server.py {self.hport} {tmp}/head.pid; }}
exec {{BASH_XTRACEFD}}>>{tmp}/trace
PS4='+${{BASH_SOURCE[0]}}:${{LINENO}}: '
set -x
source {PROGRAM}
supervise
""")
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp),
               "SLURM_JOB_ID": "41"}
        self.out = open(tmp / "job.log", "w")  # noqa: SIM115  closed in stop()
        self.proc = subprocess.Popen(["bash", str(tmp / "harness.sh")], env=env, stdout=self.out,
                                     stderr=subprocess.STDOUT,
                                     process_group=0)  # a group of its own in this session: its priority

    def log(self) -> str:
        return (self.dir / "job.log").read_text()

    def started(self) -> list[str]:
        path = self.dir / "srun.log"
        return path.read_text().split() if path.exists() else []

    def wait_for(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            ended = self.proc.poll() is not None and text not in self.log()
            assert not ended, f"the job ended ({self.proc.returncode}):\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.log()}"
            time.sleep(0.1)

    def kill_step(self, name: str, sig: int = signal.SIGKILL) -> None:
        os.kill(int((self.dir / f"{name}.pid").read_text()), sig)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.out.close()
            trace = self.dir / "trace"
            if trace.exists():
                TRACED.update(int(n) for n in re.findall(rf"^\++{re.escape(str(PROGRAM))}:(\d+): ",
                                                         trace.read_text(), re.M))
        return code


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(**kw) -> Job:
        jobs.append(Job(tmp_path, **kw))
        return jobs[-1]

    yield start
    for j in jobs:
        j.stop()


def test_workers_start_first_the_head_once_they_listen_and_the_endpoint_once_it_answers(job):
    j = job()
    j.wait_for("endpoint registered")
    assert [s for s in j.started() if s in ("rpc-worker-a", "head")] == ["rpc-worker-a", "head"]
    assert json.loads(j.record.read_text()) == {"tier": "t", "host": "127.0.0.1", "port": j.hport, "job_id": "41",
                                                 "nodes": ""}
    assert j.stop() == 143  # SLURM's SIGTERM: the head stops first, then the workers; the record goes
    log = j.log()
    assert log.index("head stopped") < log.index("1 worker step(s) stopped after the head")
    assert not j.record.exists()


def test_a_crashed_worker_is_started_again_inside_the_job_and_the_head_after_it(job):
    j = job()
    j.wait_for("endpoint registered")
    (j.dir / "job").write_text("JobId=41 JobName=t JobState=RUNNING Reason=None PreemptTime=None Partition=p\n")
    j.kill_step("worker")
    j.wait_for("healthy again after restart 1")
    assert "restart 1 of 3 inside job 41" in j.log()
    assert [s for s in j.started() if s in ("rpc-worker-a", "head")] == ["rpc-worker-a", "head"] * 2
    assert j.record.exists()  # the endpoint stayed registered all along: the gateway held its requests


def test_a_step_ended_while_slurm_ends_the_job_is_not_restarted_and_the_job_ends_at_once(job):
    """A preemption signals the steps only, for its grace time (60 s here): the script stops the rest and exits at
    once instead of holding the node until SLURM's SIGKILL."""
    j = job(grace=60)
    j.wait_for("endpoint registered")
    (j.dir / "job").write_text("JobId=41 JobState=RUNNING PreemptTime=2026-11-28T21:00:00 Partition=p\n")
    started = time.monotonic()
    j.kill_step("head", signal.SIGTERM)  # SLURM's signal to the job's tasks
    assert j.proc.wait(30) == 143, j.log()
    assert time.monotonic() - started < 15  # not the grace time: the workers stop within (60 - 5) / 2 s, at once
    log = j.log()
    assert "SLURM is ending job 41: head is not restarted; stopping the rest now" in log
    assert "worker step(s) stopped after the head" in log
    assert "restart 1" not in log and j.started().count("head") == 1
    assert not j.record.exists()  # the gateway no longer sends to it


def test_a_step_sigterm_ended_when_slurm_cannot_be_asked_waits_for_the_jobs_signal_then_restarts(job):
    j = job()
    j.wait_for("endpoint registered")
    j.kill_step("head", signal.SIGTERM)  # no job file: scontrol answers nothing
    j.wait_for("was stopped by SIGTERM; waiting 1 s for the job's own")
    j.wait_for("healthy again after restart 1")


def test_restarts_in_a_row_are_bounded_and_the_job_requeued(job):
    j = job(worker="python3 -c 'raise SystemExit(3)'", restarts=2, requeue=1)
    assert j.proc.wait(60) == 1
    log = j.log()
    assert "rpc-worker-a ended (exit status 3)" in log
    assert "rpc-worker-a ended; 2 restarts in a row did not bring the tier back; stopping the job" in log
    assert (j.dir / "requeued").read_text().split() == ["41"]
    assert "head" not in j.started()  # a head without its workers would abort


def test_a_node_slurm_says_is_down_is_given_up_on(job):
    j = job()
    j.wait_for("endpoint registered")
    (j.dir / "node-a").write_text("NodeName=a State=DOWN+NOT_RESPONDING SlurmdStartTime=2026-11-28T20:00:00\n")
    j.kill_step("worker")
    assert j.proc.wait(30) == 1
    assert "a left or restarted since the job began; stopping the job" in j.log()


def bash_of(function: str, *args: str, files: dict[str, str] | None = None, tmp: Path) -> int:
    """The supervisor's function run alone, with the fake scontrol; its exit status."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    for name, text in (files or {}).items():
        (tmp / name).write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp), "SLURM_JOB_ID": "41"}
    script = f"exec {{BASH_XTRACEFD}}>>{tmp}/trace; PS4='+${{BASH_SOURCE[0]}}:${{LINENO}}: '; set -x; " \
             f"source {PROGRAM}; JOB_STARTED=1800000000; {function} \"$@\""
    code = subprocess.run(["bash", "-c", script, "bash", *args], env=env, check=False).returncode
    TRACED.update(int(n) for n in re.findall(rf"^\++{re.escape(str(PROGRAM))}:(\d+): ", (tmp / "trace").read_text(),
                                             re.M))
    return code


@pytest.mark.parametrize("shown, expected", [
    ("JobId=41 JobState=RUNNING PreemptTime=None", 1),
    ("JobId=41 JobState=RUNNING PreemptTime=2026-11-28T21:00:00", 0),  # preempted: in its grace time
    ("JobId=41 JobState=CANCELLED Reason=None PreemptTime=None", 0),  # scancel
    ("JobId=41 JobState=COMPLETING PreemptTime=None", 0),
    ("JobId=41 JobState=TIMEOUT PreemptTime=None", 0),
    (None, 2),  # the controller does not answer: cannot tell
])
def test_whether_slurm_is_ending_the_job(tmp_path, shown, expected):
    assert bash_of("job_ending", files={"job": shown} if shown else {}, tmp=tmp_path) == expected


@pytest.mark.parametrize("shown, lost", [
    ("NodeName=a State=IDLE SlurmdStartTime=2026-11-28T20:00:00", False),
    ("NodeName=a State=DOWN SlurmdStartTime=2026-11-28T20:00:00", True),
    ("NodeName=a State=MIXED+REBOOT_REQUESTED SlurmdStartTime=2026-11-28T20:00:00", True),
    ("NodeName=a State=ALLOCATED SlurmdStartTime=2030-01-01T00:00:00", True),  # slurmd started after the job: reboot
    (None, False),  # cannot tell: the restart is tried
])
def test_whether_a_node_left_or_restarted(tmp_path, shown, lost):
    assert (bash_of("node_lost", "a", files={"node-a": shown} if shown else {}, tmp=tmp_path) == 0) == lost


def test_these_tests_run_nine_in_ten_of_the_supervisors_lines():
    """Lines that run commands, outside the guards (programs for bash -c on the step's node, run by srun there)."""
    if len(TRACED) < 10:
        pytest.skip("run with the tests above")
    lines = PROGRAM.read_text().splitlines()
    guards, counted = False, set()
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if re.match(r"(SERVER|WORKER)_GUARD='", text):
            guards = True
        if guards:
            guards = not text.endswith("'") or text.endswith("='")
            continue
        if lines[n - 2].endswith("\\"):  # a command's continued line: traced as its first
            continue
        if not text or text.startswith("#") or re.fullmatch(r"(\}|fi|done|esac|else|then|do|;;|\w+\(\) \{.*)", text):
            continue
        counted.add(n)
    missed = sorted(counted - TRACED)
    assert len(counted & TRACED) / len(counted) >= 0.9, [f"{n}: {lines[n - 1].strip()}" for n in missed]
