#!/usr/bin/python3
"""clusterbook-keeper CONFIG.json: keeps the SLURM tiers that should run submitted, on the controller's timer.

A tier deployed with `invoke deploy.<tier>` is marked wanted (its job's `wanted` mark); `invoke stop.<tier>` removes
the mark. A wanted tier with no pending or running job (it failed, was cancelled or preempted without requeue, or its
node left) is submitted again: at once when its last job served, else after 5 s, then 10, 20, ... at most 300 s, so a
job that cannot start is not resubmitted every pass. A tier on demand that had no request for its idle time and has
none in flight is released: the gateway's wake service decides it (GET /release/<tier>, under the lock that admits
requests), notes it as released with the reason, and the keeper cancels the job. A tier's jobs are its own by the
ids clusterbook recorded and its user (slurm_jobs.py): another user's job that took its name is neither waited on
nor cancelled. Every mark's file, the job's lock and the digest rule come in the configuration (clusterbook's
pure/slurmjob.py names them). Python 3.6: EL 8's.
"""
import contextlib
import fcntl
import json
import os
import sys
import time

sys.path.insert(0, "/usr/local/lib/clusterbook")  # slurm_jobs.py, where the deploy installs it (layout.py)
import slurm_jobs  # in clusterbook's source beside this file, where Python looks first when run from there

SERVED = ": healthy; endpoint registered"  # what a job's log says once it served (the batch script writes it)
COMPLETING_WAIT_S = 10  # a COMPLETING job will not serve again; one that stays so this long is not waited for
LOCK_WAIT_S = 120  # a deploy's or restart's submission holds the job's lock at most this long
TAG = "clusterbook-keeper"


def backoff_s(tries):
    """Seconds before the next submission of a job whose last `tries + 1` jobs ended without serving."""
    return 300 if tries >= 6 else 5 << tries


def decide(states, completing_age_s, tries_at, now, last_served):
    """What the keeper does for a wanted job: ("has", None) it has a pending or running one; ("wait", why) not yet;
    ("submit", tries) submit it, `tries` counting the jobs in a row that ended without serving (-1: none).
    states: squeue's states of the job's name; completing_age_s: how long it has been seen only COMPLETING (None: not
    seen so); tries_at: (tries, time) of the last submission, or None; last_served: its last job's log says it served
    (None: no log)."""
    if any(s != "COMPLETING" for s in states):
        return "has", None
    if states and (completing_age_s is None or completing_age_s < COMPLETING_WAIT_S):
        return "wait", "its job is completing"
    if tries_at is not None and last_served is False:
        tries, at = tries_at
        left = backoff_s(tries) - (now - at)
        if left > 0:
            return "wait", "its last job ended without serving; the next in {} s".format(int(left))
        return "submit", tries + 1
    return "submit", 0


command = slurm_jobs.command  # (exit status, stdout, stderr); the tests put fakes of squeue, sbatch, scancel here


def journal(message):
    command(["logger", "-t", TAG, message])


def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


class Keeper:
    def __init__(self, config, now=time.time):
        self.config = config
        self.now = now

    def states(self, job):
        """The states of the tier's own jobs; None when squeue failed (nothing is submitted on a failed look)."""
        return slurm_jobs.own(job, "%T", run=command)

    def last_log(self, job):
        """The log of the newest job clusterbook submitted for the tier that left one (<job>-<id>.log), or None."""
        for job_id in reversed(slurm_jobs.recorded(job)):
            path = os.path.join(self.config["log_dir"], "{}-{}.log".format(job["job"], job_id))
            if os.path.isfile(path):
                return path
        return None

    def tries_at(self, job):
        try:
            with open(job["marks"]["tries"]) as f:
                tries, at = f.read().split()
            return int(tries), float(at)
        except (OSError, ValueError):
            return None

    def keep(self, job):
        """Under the job's lock (a deploy's or restart's submission takes it too): submit a wanted job that has
        none. False when a submission failed."""
        with open(job["marks"]["lock"], "a") as lock:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        return True  # a submission holds it: it is being taken care of
                    time.sleep(0.5)
            return self.keep_locked(job)

    def keep_locked(self, job):
        marks = job["marks"]
        if not os.path.exists(marks["wanted"]):
            return True
        states, now = self.states(job), self.now()
        if states is None:
            print("{}: squeue failed; nothing submitted this pass".format(job["job"]), flush=True)
            return True
        seen = mtime(marks["completing"])
        if states and all(s == "COMPLETING" for s in states) and seen is None:
            open(marks["completing"], "a").close()
            seen = mtime(marks["completing"])
        last = self.last_log(job)
        served = None
        if last is not None:
            with open(last, errors="replace") as f:
                served = SERVED in f.read()
        action, detail = decide(states, None if seen is None else now - seen, self.tries_at(job), now, served)
        if action != "wait" or not states:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marks["completing"])
        if action == "has":
            self.note_waiting(job, states)
            return True
        if action == "wait":
            print("{}: {}".format(job["job"], detail), flush=True)
            return True
        return self.submit(job, detail, last)

    def note_waiting(self, job, states):
        """The waiting mark, while the tier's own job is pending because other jobs hold its nodes (VASP's): who,
        and when SLURM expects it to start (else when they end), for the gateway's Retry-After; removed otherwise."""
        held = slurm_jobs.holders(job, run=command) if states and all(s == "PENDING" for s in states) else None
        path = job["marks"]["waiting"]
        if held is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        _, _, start, found = held
        ends = [slurm_jobs.epoch(h[5]) for h in found]
        until = slurm_jobs.epoch(start) if start else (max(ends) if ends and None not in ends else None)
        users = sorted({"{} ({})".format(h[1], h[2]) for h in found})
        with open(path + ".tmp", "w") as f:
            json.dump({"until": until, "held_by": "; ".join(users), "since": int(self.now())}, f)
        os.replace(path + ".tmp", path)

    def submit(self, job, tries, last):
        job_id, why = slurm_jobs.submit(job, self.config["digest_chars"], run=command)
        if job_id is None:
            journal("{}: no pending or running job, and sbatch failed ({})".format(job["job"], why))
            return False
        with open(job["marks"]["tries"], "w") as f:
            f.write("{} {}\n".format(tries, int(self.now())))
        quick = " (its last {} job(s) ended without serving)".format(tries) if tries > 0 else ""
        others = slurm_jobs.others(job, run=command)
        foreign = "; not its own, left alone: job {}".format(", job ".join(others)) if others else ""
        journal("{}: no pending or running job (last log: {}); submitted it again as job {}{}{}".format(
            job["job"], last or "none", job_id, quick, foreign))
        print("{}: submitted again as job {}".format(job["job"], job_id), flush=True)
        return True

    def release_if_idle(self, job):
        """Ask the wake service whether an idle tier on demand is released; cancel its job when it is."""
        if not os.path.exists(job["marks"]["wanted"]):
            return
        if not slurm_jobs.own(job, "%i", "RUNNING", run=command):
            return  # only a running job is released
        url = "http://127.0.0.1:{}/release/{}?idle_s={}".format(self.config["wake_port"], job["tier"], job["idle_s"])
        import urllib.request  # here: a pass without a tier on demand runs every few seconds, and the import is
        # most of its start (22 of 35 ms on a lab node)
        try:
            with urllib.request.urlopen(url, timeout=20) as response:
                answer = json.loads(response.read().decode())
        except (OSError, ValueError):
            return
        if answer.get("released") is not True:
            return
        cancelled, why = slurm_jobs.cancel(job, only=answer.get("job_id"), run=command)
        journal("{}: no request for {} s and none in flight: released (job {} {})".format(
            job["tier"], answer.get("idle_s"), answer.get("job_id"),
            "cancelled" if cancelled and not why else "not cancelled: " + (why or "not its own job")))
        print("{}: released".format(job["tier"]), flush=True)

    def released_metrics(self):
        """For Prometheus (the node exporter's textfile collector): which tiers on demand are released, and the GPUs
        each gives back meanwhile. The alerts of a released tier stay quiet while it reads 1."""
        folder = self.config["textfile_dir"]
        if not os.path.isdir(folder):
            return
        lines = ["# HELP clusterbook_tier_released 1 while the keeper has released the tier on demand",
                 "# TYPE clusterbook_tier_released gauge",
                 "# HELP clusterbook_tier_released_gpus GPUs a tier on demand gives back while it is released",
                 "# TYPE clusterbook_tier_released_gpus gauge"]
        for job in self.on_demand():
            released = int(os.path.exists(job["marks"]["released"]))
            lines.append('clusterbook_tier_released{{tier="{}"}} {}'.format(job["tier"], released))
            lines.append('clusterbook_tier_released_gpus{{tier="{}"}} {}'.format(job["tier"], released * job["gpus"]))
        path = os.path.join(folder, "clusterbook-on-demand.prom")
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)

    def on_demand(self):
        return [j for j in self.config["jobs"] if j["idle_s"]]

    def one_pass(self):
        """Release the idle tiers on demand, keep every wanted tier submitted; True when every submission worked."""
        started = self.now()
        for job in self.on_demand():
            self.release_if_idle(job)
        ok = all([self.keep(job) for job in self.config["jobs"]])
        # A request that woke a tier during this pass, after keep() looked at it, started this unit while it ran:
        # systemd merged that start into this run, so keep it now, not a timer interval later
        for job in self.on_demand():
            if (mtime(job["marks"]["wanted"]) or 0) > started:
                ok = self.keep(job) and ok
        if self.on_demand():
            self.released_metrics()
        return ok


def main(path):
    with open(path) as f:
        config = json.load(f)
    sys.exit(0 if Keeper(config).one_pass() else 1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: clusterbook-keeper CONFIG.json")
    main(sys.argv[1])
