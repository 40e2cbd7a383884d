"""clusterbook-jobs (clusterbook/node/slurm_jobs.py) against a fake SLURM queue: a tier's own jobs are those clusterbook
recorded by id, of the tiers' user; a job of another user, or one clusterbook did not submit, that takes the tier's
name is listed as another's and never cancelled; the command line's exit statuses; the script the controller runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import clusterbook.node
from clusterbook.model.loader import load_cluster
from clusterbook.pure import layout
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.slurmjob import MARKS

from .fakeslurm import Slurm

NODE = Path(clusterbook.node.__file__).parent
sys.path.insert(0, str(NODE))
import slurm_jobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tier(tmp_path):
    script = tmp_path / "llama-fast.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=llama-fast\n")
    job = {"job": "llama-fast", "tier": "fast", "script": str(script), "user": "root", "nodes": ["vasp-02"],
           "marks": {m: str(tmp_path / f"llama-fast.{m}") for m in MARKS}}
    config = tmp_path / "keeper.json"
    config.write_text(json.dumps({"digest_chars": 16, "jobs": [job]}))
    return job, str(config), Slurm()


def cli(config, slurm, *argv):
    out = io.StringIO()
    return slurm_jobs.main([config, *argv], out=out, run=slurm.command), out.getvalue()


def test_submit_records_the_id_and_squeue_shows_only_the_tiers_own_jobs(tier):
    job, config, slurm = tier
    theirs = slurm.add("llama-fast", "mallory", "PENDING", "JobHeldUser")
    status, out = cli(config, slurm, "submit", "fast", "--export=ALL,X=1")
    mine = out.strip()
    assert status == 0 and mine.isdigit() and slurm_jobs.recorded(job) == [mine]
    assert slurm.submitted[-1][:3] == ["--parsable", f"--comment={slurm_jobs.digest(job, 16)}", "--export=ALL,X=1"]
    root_by_hand = slurm.add("llama-fast", "root", "RUNNING")  # the same user, but not clusterbook's submission
    assert cli(config, slurm, "squeue", "fast", "-o", "%i %T") == (0, f"{mine} PENDING\n")
    assert cli(config, slurm, "squeue", "fast", "-t", "RUNNING") == (0, "")
    assert cli(config, slurm, "others", "fast") == (
        0, f"{theirs} mallory PENDING (JobHeldUser)\n{root_by_hand} root RUNNING (None)\n")


def test_cancel_takes_only_the_tiers_own_jobs_and_waits_until_they_left(tier):
    _, config, slurm = tier
    theirs = slurm.add("llama-fast", "mallory", "RUNNING")
    _, first = cli(config, slurm, "submit", "fast")
    _, second = cli(config, slurm, "submit", "fast")
    assert cli(config, slurm, "cancel", "fast", first.strip()) == (0, f"cancelled job {first.strip()}\n")
    assert cli(config, slurm, "cancel", "fast", "--wait", "5") == (0, f"cancelled job {second.strip()}\n")
    assert [j.id for j in slurm.jobs] == [theirs] and cli(config, slurm, "cancel", "fast") == (0, "")


def test_a_job_that_stays_in_the_queue_past_the_wait_is_named(tier):
    job, _, slurm = tier
    job_id, _ = slurm_jobs.submit(job, 16, run=slurm.command)
    clock = iter(range(100))

    def stuck(argv, timeout=30):  # scancel succeeds, the job stays COMPLETING
        return (0, "", "") if argv[0] == "scancel" else slurm.command(argv)
    ids, why = slurm_jobs.cancel(job, wait_s=3, run=stuck, sleep=lambda s: None, clock=lambda: next(clock))
    assert ids == [job_id] and why == f"still in the queue after 3 s: job(s) {job_id}"
    # not asked to wait: cancelled is done, whether SLURM has let it go yet or not (the keeper's release, an Act step)
    assert slurm_jobs.cancel(job, run=stuck) == ([job_id], None)


def test_a_job_pending_while_another_job_holds_its_nodes_is_waiting_and_says_until_when(tier):
    """Issue 64: VASP holding a node is beefcake2's normal day. The tier's own job pending behind it is waiting, with
    the holder and SLURM's estimate; pending for any other reason (a limit, or no other job on its nodes) is not."""
    _, config, slurm = tier
    _, out = cli(config, slurm, "submit", "fast")
    mine = next(j for j in slurm.jobs if j.id == out.strip())
    mine.reason, mine.start = "Resources", "2026-12-05T18:00:05"
    assert cli(config, slurm, "waiting", "fast") == (1, "")  # nothing else on vasp-02: not waiting on anyone
    sibling_id = slurm.add("llama-reasoning", "root", "RUNNING")
    sibling = next(j for j in slurm.jobs if j.id == sibling_id)
    sibling.nodes = "vasp-02"  # the tiers' own user's job (another tier, a build): a moment's wait, not VASP's
    assert cli(config, slurm, "waiting", "fast") == (1, "")
    vasp = slurm.add("vasp-relax", "alice", "RUNNING")
    holder = next(j for j in slurm.jobs if j.id == vasp)
    holder.nodes, holder.partition, holder.start = "vasp-01,vasp-02", "vasp", "2026-12-05T18:00:00"
    slurm.add("vasp-other", "bob", "RUNNING")  # on no node of the tier's: not named
    assert cli(config, slurm, "waiting", "fast") == (0, (
        f"job {mine.id} pending (Resources) while other jobs hold its nodes: job {vasp} (vasp-relax, user alice, "
        "partition vasp) on vasp-01,vasp-02 until 2026-12-05T18:00:00; SLURM expects it to start at "
        "2026-12-05T18:00:05\n"))
    mine.start = "N/A"
    assert cli(config, slurm, "waiting", "fast")[1].endswith("SLURM gives no start estimate yet\n")
    mine.reason = "QOSMaxGRESPerUser"  # a limit of the cluster's: not a higher-priority job's nodes
    assert cli(config, slurm, "waiting", "fast") == (1, "")
    mine.reason, mine.state = "None", "RUNNING"
    assert cli(config, slurm, "waiting", "fast") == (1, "")


def test_a_job_just_preempted_by_another_users_job_is_waiting_until_the_keeper_submits_it_again(tier):
    """Issue 64: between a preemption and the keeper's next pass the tier has no job in the queue; deploy's serving
    wait read that as a job that exited (exit 1 in a 12-minute VASP-like day). Preempted in the last two minutes:
    waiting, naming the preemptor once it runs on the tier's nodes. Ended another way, preempted long ago (the keeper
    should have submitted it again), or forgotten by SLURM: not."""
    _, config, slurm = tier
    _, out = cli(config, slurm, "submit", "fast")
    mine = next(j for j in slurm.jobs if j.id == out.strip())
    slurm.jobs.remove(mine)
    assert cli(config, slurm, "waiting", "fast") == (1, "")  # SLURM no longer knows how it ended
    slurm.ended[mine.id] = "None"
    assert cli(config, slurm, "waiting", "fast") == (1, "")  # cancelled, crashed: not VASP's doing
    just = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    slurm.ended[mine.id] = just  # its state reads FAILED: the preemption's time tells
    assert cli(config, slurm, "waiting", "fast") == (0, (
        f"job {mine.id} was preempted at {just} by other jobs on its nodes: the job that preempted it starts there "
        "now; the keeper submits it again to wait for them\n"))
    vasp = slurm.add("vasp-relax", "alice", "RUNNING")
    holder = next(j for j in slurm.jobs if j.id == vasp)
    holder.nodes, holder.partition, holder.start = "vasp-02", "vasp", "2026-12-05T18:00:00"
    assert cli(config, slurm, "waiting", "fast") == (0, (
        f"job {mine.id} was preempted at {just} by other jobs on its nodes: job {vasp} (vasp-relax, user alice, "
        "partition vasp) on vasp-02 until 2026-12-05T18:00:00; the keeper submits it again to wait for them\n"))
    slurm.ended[mine.id] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    assert cli(config, slurm, "waiting", "fast") == (1, "")  # ten minutes and no new job: not a moment's wait
    slurm.ended[mine.id] = just
    cli(config, slurm, "submit", "fast")  # the keeper's new job, running: its own serving wait decides
    next(j for j in slurm.jobs if j.name == "llama-fast").state = "RUNNING"
    assert cli(config, slurm, "waiting", "fast") == (1, "")


@pytest.mark.parametrize("argv, status", [
    (["squeue", "fast", "-x"], 2),  # an option it does not know
    (["cancel", "fast", "--wait", "soon"], 2),
    (["cancel", "fast", "1", "2"], 2),
    (["restart", "fast"], 2),
    (["squeue", "slow"], 2),  # no such tier
    (["squeue"], 2),
])
def test_usage_errors_exit_2(tier, argv, status):
    _, config, slurm = tier
    assert cli(config, slurm, *argv)[0] == status


def test_slurm_that_does_not_answer_fails_and_submits_nothing(tier):
    job, config, slurm = tier
    slurm.fails = {"squeue", "sbatch"}
    assert cli(config, slurm, "squeue", "fast")[0] == 1
    assert cli(config, slurm, "others", "fast")[0] == 1
    assert cli(config, slurm, "cancel", "fast")[0] == 1
    assert cli(config, slurm, "submit", "fast") == (1, "\n") and slurm_jobs.recorded(job) == []


def test_the_ids_keep_the_newest_and_a_node_without_them_goes_by_user(tier):
    job, _, slurm = tier
    for n in range(slurm_jobs.KEEP_IDS + 5):
        slurm_jobs.record(job, str(n))
    assert slurm_jobs.recorded(job) == [str(n) for n in range(5, slurm_jobs.KEEP_IDS + 5)]
    probe_side = {**job, "marks": {"ids": None}}  # the probe on another node than the controller
    slurm.add("llama-fast", "root", "RUNNING")
    slurm.add("llama-fast", "mallory", "RUNNING")
    assert slurm_jobs.own(probe_side, "%u", run=slurm.command) == ["root"]


def test_the_controllers_command_runs_the_program_with_the_keepers_configuration(tmp_path):
    """The rendered clusterbook-jobs runs on the node: its usage comes back with exit status 2."""
    c = load_cluster(ROOT / "cluster.yaml")
    files = {(a.node, a.path): a for a in render_artifacts(c)}
    wrapper = files[(c.keeper_node, layout.path(c, "jobs"))].text
    assert f"exec /usr/bin/python3 {layout.path(c, 'slurm_jobs')} {layout.path(c, 'keeper_config')} \"$@\"" in wrapper
    for node in {c.keeper_node, c.gateway.node, c.monitoring.node}:
        assert (node, layout.path(c, "slurm_jobs")) in files
    run = subprocess.run([sys.executable, str(NODE / "slurm_jobs.py")], capture_output=True, text=True)
    assert run.returncode == 2 and "submit TIER" in run.stderr


def test_a_job_that_ended_between_squeue_and_scancel_is_cancelled_not_failed(tier):
    """SLURM lab, fresh-clone CI: the released tier's job ended on its own between the squeue that found it and the
    scancel ('Invalid job id specified'); cancel failed, though nothing of the tier's was left. A job still there
    after a failed scancel is still a failure."""
    job, config, slurm = tier
    _, out = cli(config, slurm, "submit", "fast")
    job_id = out.strip()
    real, ends = slurm.command, {"first": True}

    def scancel_fails(argv, timeout=30):
        if argv[0] == "scancel":
            if ends["first"]:
                slurm.jobs[:] = [j for j in slurm.jobs if j.id != job_id]
            return 1, "", f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified\n"
        return real(argv, timeout)
    assert slurm_jobs.cancel(job, run=scancel_fails) == ([job_id], None)
    _, out = cli(config, slurm, "submit", "fast")
    ends["first"] = False
    now = [0.0]
    ids, why = slurm_jobs.cancel(job, run=scancel_fails, sleep=lambda s: now.__setitem__(0, now[0] + s),
                                 clock=lambda: now[0])
    assert ids == [out.strip()] and why.startswith("scancel exited 1")
    assert now[0] >= slurm_jobs.LEAVING_S  # it looked again for as long as an ended job may linger


def test_a_job_that_ended_on_its_own_but_lingers_in_squeue_a_moment_is_cancelled_not_failed(tier):
    """Fresh-clone CI, SLURM lab: the released tier's job ended by itself; scancel said 'Invalid job id specified'
    while squeue still listed it, for a moment."""
    job, config, slurm = tier
    _, out = cli(config, slurm, "submit", "fast")
    job_id, now = out.strip(), [0.0]
    real = slurm.command

    def scancel_fails(argv, timeout=30):
        if argv[0] == "scancel":
            return 1, "", f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified\n"
        return real(argv, timeout)

    def sleep(s):
        now[0] += s
        if now[0] >= 1.5:  # gone from squeue 1.5 s later
            slurm.jobs[:] = [j for j in slurm.jobs if j.id != job_id]
    assert slurm_jobs.cancel(job, run=scancel_fails, sleep=sleep, clock=lambda: now[0]) == ([job_id], None)
