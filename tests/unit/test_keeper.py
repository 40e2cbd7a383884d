"""The keeper (clusterbook/node/keeper.py) in process, with fakes of squeue, sbatch, scancel and logger and a fake
wake service: its decisions table-driven, then whole passes; a tier whose jobs keep ending without serving is
submitted ever more slowly, one that served at once; an idle tier on demand is released. The last test measures
which of the keeper's lines these tests run (the standard library's trace): at least 90 %."""

from __future__ import annotations

import dis
import http.server
import importlib.util
import json
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest

import clusterbook.node
from clusterbook.pure.slurmjob import MARKS

from .fakeslurm import Slurm

PROGRAM = Path(clusterbook.node.__file__).parent / "keeper.py"
sys.path.insert(0, str(PROGRAM.parent))  # keeper.py imports slurm_jobs.py from beside it, as on the node
import slurm_jobs  # noqa: E402


def load():
    spec = importlib.util.spec_from_file_location("clusterbook_keeper", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


keeper = load()


@pytest.mark.parametrize("states, age, tries_at, last_served, expected", [
    (["RUNNING"], None, None, None, ("has", None)),
    (["PENDING", "COMPLETING"], None, None, None, ("has", None)),
    (["COMPLETING"], 3, None, None, ("wait", "its job is completing")),
    (["COMPLETING"], 10, None, None, ("submit", 0)),  # completing for 10 s: not waited for any longer
    ([], None, None, None, ("submit", 0)),  # never submitted
    ([], None, (0, 1000), False, ("wait", "its last job ended without serving; the next in 2 s")),
    ([], None, (0, 1000), False, ("wait", "its last job ended without serving; the next in 2 s")),
    ([], None, (2, 1000), False, ("wait", "its last job ended without serving; the next in 17 s")),  # 20 s
    ([], None, (2, 980), False, ("submit", 3)),
    ([], None, (9, 800), False, ("wait", "its last job ended without serving; the next in 97 s")),  # at most 300 s
    ([], None, (4, 1000), True, ("submit", 0)),  # it served: at once, and the count starts afresh
    ([], None, (4, 1000), None, ("submit", 0)),  # no log: nothing says it failed
])
def test_what_the_keeper_does_for_a_wanted_job(states, age, tries_at, last_served, expected):
    assert keeper.decide(states, age, tries_at, 1003, last_served) == expected


class Node(Slurm):
    """The controller as the keeper sees it: SLURM's queue (fakeslurm.py) and the journal; `states` are the states of
    the tier's own jobs (recorded by id, the tiers' user), another user's jobs of the same name are added apart."""

    def __init__(self, job):
        super().__init__()
        self.job = job

    def own(self):
        return [j for j in self.jobs if j.user == self.user and j.id in slurm_jobs.recorded(self.job)]

    @property
    def states(self):
        return [j.state for j in self.own()]

    @states.setter
    def states(self, states):
        for j in self.own():
            self.jobs.remove(j)
        for state in states:
            slurm_jobs.record(self.job, self.add(self.job["job"], self.user, state))

    @property
    def sbatch_fails(self):
        return "sbatch" in self.fails

    @sbatch_fails.setter
    def sbatch_fails(self, fails):
        self.fails = {"sbatch"} if fails else set()


@pytest.fixture
def world(tmp_path, monkeypatch):
    marks, logs = tmp_path / "marks", tmp_path / "logs"
    marks.mkdir()
    logs.mkdir()
    script = tmp_path / "llama-reasoning.sbatch"
    script.write_text("#!/bin/bash\necho serve\n")
    job = {"job": "llama-reasoning", "tier": "reasoning", "script": str(script), "idle_s": None, "gpus": 2,
           "user": "root", "nodes": ["vasp-01", "vasp-03"],
           "marks": {m: str(marks / f"llama-reasoning.{m}") for m in MARKS}}
    node = Node(job)
    monkeypatch.setattr(keeper, "command", node.command)
    config = {"log_dir": str(logs), "wake_port": None, "textfile_dir": str(tmp_path / "textfile"),
              "digest_chars": 16, "jobs": [job]}
    clock = [1000.0]
    k = keeper.Keeper(config, now=lambda: clock[0])
    Path(job["marks"]["wanted"]).touch()

    def one_pass(at: float, served: bool | None = None) -> int:
        """A keeper pass at this time, the last job having ended and left a log that says it served or not."""
        clock[0] = at
        if node.submitted and served is not None:
            node.states = []
            (logs / f"llama-reasoning-{slurm_jobs.recorded(job)[-1]}.log").write_text(
                "reasoning: waiting for /health\n" + ("reasoning: healthy; endpoint registered in x.json\n" if served
                                                      else "reasoning: head ended (exit status 1)\n"))
        assert k.one_pass() is not node.sbatch_fails
        return len(node.submitted)

    return k, node, job, one_pass, tmp_path


def test_jobs_that_end_without_serving_are_submitted_ever_more_slowly(world):
    _, node, job, one_pass, _ = world
    assert one_pass(1000) == 1  # the first submission
    assert one_pass(1003, served=False) == 1  # it ended without serving: not again within 5 s
    assert one_pass(1005, served=False) == 2
    assert one_pass(1010, served=False) == 2  # then 10 s
    assert one_pass(1015, served=False) == 3
    assert one_pass(1030, served=False) == 3  # then 20 s
    assert one_pass(1035, served=False) == 4
    assert "its last 3 job(s) ended without serving" in node.journal[-1]
    digest = node.submitted[0][1]
    assert digest == "--comment=" + __import__("hashlib").sha256(Path(job["script"]).read_bytes()).hexdigest()[:16]


def test_a_job_that_served_is_followed_at_once_and_starts_the_count_afresh(world):
    _, _, _, one_pass, _ = world
    for at in (1000, 1005, 1015):
        one_pass(at, served=False)
    assert one_pass(1016, served=True) == 4  # released or preempted after serving: at once
    assert one_pass(1017, served=False) == 4 and one_pass(1021, served=False) == 5  # 5 s again after one that did not


def test_a_pending_or_running_job_is_left_alone_and_an_unmarked_tier_stays_down(world):
    _, node, job, one_pass, _ = world
    node.states = ["RUNNING"]
    assert one_pass(1000) == 0
    node.states = []
    Path(job["marks"]["wanted"]).unlink()  # invoke stop.reasoning
    assert one_pass(1100) == 0


def test_a_completing_job_is_waited_for_ten_seconds_then_replaced(world):
    _, node, job, one_pass, _ = world
    node.states = ["COMPLETING"]
    assert one_pass(1000) == 0 and Path(job["marks"]["completing"]).exists()
    Path(job["marks"]["completing"]).touch()
    import os
    os.utime(job["marks"]["completing"], (989, 989))
    assert one_pass(1000) == 1 and not Path(job["marks"]["completing"]).exists()


def test_a_failed_sbatch_fails_the_pass_and_says_so(world):
    _, node, _, one_pass, _ = world
    node.sbatch_fails = True
    one_pass(1000)
    assert node.journal == ["llama-reasoning: no pending or running job, and sbatch failed (sbatch exited 1: sbatch: "
                            "error: Unable to contact slurm controller (connect failure))"]


def test_a_submission_that_holds_the_lock_is_not_doubled(world, monkeypatch):
    import fcntl
    k, node, job, _, _ = world
    monkeypatch.setattr(keeper, "LOCK_WAIT_S", 0.2)
    with open(job["marks"]["lock"], "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a deploy's submission
        assert k.keep(job) is True and node.submitted == []
    assert k.keep(job) is True and len(node.submitted) == 1


def test_another_users_job_of_the_tiers_name_keeps_nothing_down_and_is_left_alone(world):
    """Issue 64: `sbatch -J llama-reasoning --hold --wrap true` by any user answered the keeper's `squeue -n` with
    PENDING, and the tier stayed down until that job went (91 s on the SLURM lab). Its jobs are its own by id
    and user."""
    _, node, _, one_pass, _ = world
    other = node.add("llama-reasoning", "mallory", "PENDING", "JobHeldUser")
    unrecorded = node.add("llama-reasoning", "root", "RUNNING")  # root's, but not one clusterbook submitted
    assert one_pass(1000) == 1  # submitted at once
    assert f"not its own, left alone: job {other} mallory PENDING (JobHeldUser), job {unrecorded} root RUNNING " \
           "(None)" in node.journal[-1]
    assert {j.id for j in node.jobs} >= {other, unrecorded} and node.cancelled == []
    assert one_pass(1001) == 1  # and its own job, pending, is the one it keeps


def test_a_job_waiting_for_vasps_nodes_is_marked_with_who_and_until_when_for_the_gateway(world):
    """Issue 64: the gateway answers a tier whose job waits for other jobs' nodes with SLURM's estimate: the keeper
    notes who holds them and until when (the estimate, else the holders' end); the mark goes when the job runs."""
    _, node, job, one_pass, _ = world
    node.states = ["PENDING"]
    mine = next(j for j in node.jobs if j.user == "root")
    mine.reason = "Resources"
    vasp_id = node.add("vasp-relax", "alice", "RUNNING")
    vasp = next(j for j in node.jobs if j.id == vasp_id)
    vasp.nodes, vasp.partition, vasp.start = "vasp-01", "vasp", "2026-12-05T18:00:00"
    one_pass(1000)
    mark = json.loads(Path(job["marks"]["waiting"]).read_text())
    assert mark["held_by"] == "alice (vasp)" and mark["until"] == keeper.slurm_jobs.epoch("2026-12-05T18:00:00")
    mine.start = "2026-12-05T18:00:05"  # SLURM's own estimate comes first
    one_pass(1001)
    until = json.loads(Path(job["marks"]["waiting"]).read_text())["until"]
    assert until == keeper.slurm_jobs.epoch("2026-12-05T18:00:05")
    mine.state = "RUNNING"
    one_pass(1002)
    assert not Path(job["marks"]["waiting"]).exists()
    assert keeper.slurm_jobs.epoch("N/A") is None and keeper.slurm_jobs.epoch(None) is None


def test_a_failed_look_submits_nothing(world):
    _, node, _, one_pass, _ = world
    node.fails = {"squeue"}  # slurmctld does not answer: nothing says the tier has no job
    assert one_pass(1000) == 0 and node.journal == []


def test_a_release_cancels_only_the_job_it_released_and_only_its_own(world, wake):
    k, node, job, _, _ = world
    k.config["wake_port"], job["idle_s"] = wake, 10
    other = node.add("llama-reasoning", "mallory", "RUNNING")
    node.states = ["RUNNING"]
    Wake.answer = {"released": True, "idle_s": 10, "job_id": other}  # a record naming another's job
    assert k.one_pass() and node.cancelled == [] and other in {j.id for j in node.jobs}
    assert node.journal[0].endswith(f"released (job {other} not cancelled: not its own job)")


class Wake(http.server.BaseHTTPRequestHandler):
    """The wake service's /release answer; `effect` does what the real one does to the marks when it releases."""

    answer: ClassVar[dict] = {"released": True, "idle_s": 10, "job_id": "7"}
    asked: ClassVar[list] = []
    effect: ClassVar[list] = []

    def do_GET(self):
        Wake.asked.append(self.path)
        for change in self.effect:
            change()
        body = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def wake():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    Wake.asked, Wake.effect = [], []
    yield httpd.server_address[1]
    httpd.shutdown()


def test_an_idle_tier_on_demand_is_released_and_its_gpus_reported(world, wake):
    k, node, job, _, tmp_path = world
    k.config["wake_port"], job["idle_s"] = wake, 10
    (tmp_path / "textfile").mkdir()
    node.states = ["RUNNING"]
    (running,) = slurm_jobs.recorded(job)
    Wake.answer = {"released": True, "idle_s": 10, "job_id": running}
    Wake.effect = [Path(job["marks"]["wanted"]).unlink, lambda: Path(job["marks"]["released"]).write_text("idle\n")]
    assert k.one_pass()  # the wake service takes the mark and notes the release; the keeper cancels the job
    assert Wake.asked == ["/release/reasoning?idle_s=10"] and node.cancelled == [running]
    assert node.journal == [f"reasoning: no request for 10 s and none in flight: released (job {running} cancelled)"]
    assert node.submitted == []
    metrics = (tmp_path / "textfile/clusterbook-on-demand.prom").read_text()
    assert 'clusterbook_tier_released{tier="reasoning"} 1\n' in metrics
    assert 'clusterbook_tier_released_gpus{tier="reasoning"} 2\n' in metrics


def test_a_busy_tier_on_demand_is_kept_and_a_silent_wake_service_changes_nothing(world, wake):
    k, node, job, _, _ = world
    k.config["wake_port"], job["idle_s"] = wake, 10
    node.states = ["RUNNING"]
    Wake.answer = {"released": False}
    assert k.one_pass() and node.cancelled == []
    k.config["wake_port"] = 9  # nothing listens
    assert k.one_pass() and node.cancelled == []
    node.states = ["PENDING"]  # only a running job is released
    assert k.one_pass() and len(Wake.asked) == 1


def test_a_tier_woken_during_the_pass_is_kept_in_the_same_pass(world, wake, monkeypatch):
    k, node, job, _, _ = world
    k.config["wake_port"], job["idle_s"] = wake, 10
    calls = []
    original = k.keep

    def keep(j):
        calls.append(j["job"])
        return original(j)
    monkeypatch.setattr(k, "keep", keep)
    Path(job["marks"]["wanted"]).touch()
    import os
    os.utime(job["marks"]["wanted"], (2000, 2000))  # marked after the pass started (the clock reads 1000)
    node.states = ["RUNNING"]
    k.one_pass()
    assert calls == ["llama-reasoning", "llama-reasoning"]


def test_no_log_folder_reads_as_no_log_and_an_unmarked_tier_on_demand_is_not_asked(world, wake):
    k, node, job, _, _ = world
    k.config["log_dir"] = "/nonexistent"
    assert k.last_log(job) is None
    k.config["wake_port"], job["idle_s"] = wake, 10
    Path(job["marks"]["wanted"]).unlink()
    node.states = ["RUNNING"]
    assert k.one_pass() and Wake.asked == []


def test_a_command_that_fails_or_is_missing_reads_as_failed():
    assert keeper.command(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\n", "err\n")
    assert keeper.command(["/nonexistent/squeue"])[0] == 127
    assert keeper.command(["sleep", "5"], timeout=0.1)[0] == 127


def test_main_reads_its_configuration_and_exits_with_the_pass(world, monkeypatch):
    k, node, _, _, tmp_path = world
    path = tmp_path / "keeper.json"
    path.write_text(json.dumps(k.config))
    node.states = ["RUNNING"]
    with pytest.raises(SystemExit) as done:
        keeper.main(str(path))
    assert done.value.code == 0


def function_lines(code) -> set[int]:
    """The lines of the functions and methods in a module's code (its own top-level lines run at import)."""
    lines = set()
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            own = {line for _, line in dis.findlinestarts(const) if line} - {const.co_firstlineno}  # def: at import
            lines |= own | function_lines(const)
    return lines


def test_these_tests_run_at_least_90_percent_of_the_keepers_lines(request):
    """The lines of keeper.py the tests above ran (traced by the module's fixture below), against every line it
    has but the command-line guard."""
    others = [i for i in request.session.items if i.module is request.module and i is not request.node]
    if len(RUN) < len(others):
        pytest.skip("measured only when every test of this module runs")
    text = PROGRAM.read_text().splitlines()
    guard = next(i for i, line in enumerate(text, 1) if line.startswith('if __name__ == "__main__":'))
    body = {n for n in function_lines(compile("\n".join(text), str(PROGRAM), "exec")) if n < guard}
    hit = HIT & body
    assert len(hit) / len(body) >= 0.9, f"{len(hit)} of {len(body)} lines run; not run: {sorted(body - hit)}"


HIT: set[int] = set()  # keeper.py's lines the tests ran
RUN: list[str] = []


@pytest.fixture(autouse=True)
def traced(request):
    """Record which of keeper.py's lines each test runs (sys.settrace, this thread; the standard library's)."""
    previous = sys.gettrace()

    def local(frame, event, arg):
        if event == "line":
            HIT.add(frame.f_lineno)
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename == str(PROGRAM) else None
    sys.settrace(calls)
    yield
    sys.settrace(previous)
    RUN.append(request.node.name)
