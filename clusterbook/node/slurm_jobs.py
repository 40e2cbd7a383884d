#!/usr/bin/python3
"""clusterbook-jobs CONFIG.json COMMAND TIER ...: a SLURM tier's own jobs, by the ids clusterbook recorded and its user.

A job name is anyone's: `sbatch -J llama-fast` works for every user of the cluster. A tier's own jobs are those whose
id clusterbook recorded when it submitted them (the tier's `ids` mark, beside the keeper's other marks) and whose user
is the tiers' SLURM user; a job that only shares the name is another's, reported and never waited on or cancelled.
The keeper, the wake service and the probe import this file; the runbooks run it as a command:

  submit TIER [SBATCH_OPTION ...]      sbatch the tier's script (its digest as the comment), record the id, print it
  squeue TIER [-t STATES] [-o FORMAT]  squeue's lines (FORMAT, default %i) of the tier's own jobs
  cancel TIER [--wait S] [JOB_ID]      scancel the tier's own jobs (or that one of them), then wait until they left
  others TIER                          the jobs that share the tier's name and are not its own: `ID USER STATE REASON`
  waiting TIER                         exit 0 and one line when the tier's own job is pending while other jobs hold
                                       the nodes it may run on (VASP's, on beefcake2): which, and SLURM's estimate;
                                       or when those jobs just preempted it and the keeper submits it again

CONFIG is the keeper's configuration (clusterbook's pure/render/node_config.py writes it). Python 3.6: EL 8's.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

PREEMPTED_RECENT_S = 120  # a preempted job the keeper has not submitted again for longer: something else is wrong
KEEP_IDS = 50  # ids kept per tier: more than one tier ever has in the queue at once
LEAVING_S = 5  # after a failed scancel, how long a job that ended on its own may still show in squeue
SEP = "\x1f"  # between the id and the caller's format in squeue's output: no field holds it


def command(argv, timeout=30):
    """(exit status, stdout, stderr) of a command; a command that is not there or hangs fails."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)


def epoch(slurm_time):
    """Seconds since the epoch of a SLURM time (2026-12-05T18:00:05, the controller's local time); None if not one."""
    try:
        return int(time.mktime(time.strptime(slurm_time, "%Y-%m-%dT%H:%M:%S")))
    except (TypeError, ValueError, OverflowError):
        return None


def recorded(job):
    """The ids clusterbook submitted for this job, oldest first (none where its mark is not on this node)."""
    path = job["marks"].get("ids")
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip().isdigit()]
    except (OSError, TypeError):
        return []


def record(job, job_id):
    """Add a submitted job's id to the tier's ids (the newest KEEP_IDS), replacing the file at once."""
    ids = [i for i in recorded(job) if i != job_id][-(KEEP_IDS - 1):] + [job_id]
    path = job["marks"]["ids"]
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ids.")
    os.fchmod(fd, 0o644)  # not secret: the hold service (its own user) and status read them
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(ids) + "\n")
    os.replace(tmp, path)


def queue(job, fmt="%i", states=None, run=None):
    """[(id, user, the FORMAT part)] of every job in the queue with the tier's job name; None when squeue failed."""
    run = run or command  # looked up when called: the tests put a fake SLURM there
    argv = ["squeue", "-h", "-n", job["job"], "-o", "%i" + SEP + "%u" + SEP + fmt]
    if states:
        argv += ["-t", states]
    status, out, _ = run(argv)
    if status != 0:
        return None
    rows = []
    for line in out.splitlines():
        parts = line.split(SEP, 2)
        if len(parts) == 3:
            rows.append((parts[0].strip(), parts[1].strip(), parts[2]))
    return rows


def mine(job, job_id, user):
    """Whether a queued job is the tier's own: its user is the tiers' and its id was recorded (on a node without the
    ids, such as a probe's apart from the controller, its configuration names none: the user alone)."""
    if user != job["user"]:
        return False
    return job["marks"].get("ids") is None or job_id in recorded(job)


def own(job, fmt="%i", states=None, run=None):
    """The FORMAT lines of the tier's own jobs; None when squeue failed."""
    rows = queue(job, fmt, states, run)
    if rows is None:
        return None
    return [rest for job_id, user, rest in rows if mine(job, job_id, user)]


def others(job, run=None):
    """`ID USER STATE (REASON)` of each job that shares the tier's name and is not its own (None: squeue failed)."""
    rows = queue(job, "%T (%r)", None, run)
    if rows is None:
        return None
    return ["{} {} {}".format(i, u, rest) for i, u, rest in rows if not mine(job, i, u)]


WAITS_FOR_NODES = ("Resources", "Priority")  # pending because running jobs hold the nodes or come first


def held_by_others(job, run):
    """[(id, user, partition, name, nodes, end)] of other users' jobs running on the nodes the tier may use. The tiers'
    own (another tier's job, a build, the tier's previous job still ending) are a moment's wait, for which the gateway
    holds requests; a VASP job is another user's."""
    status, out, _ = run(["squeue", "-h", "-t", "RUNNING,COMPLETING", "-w", ",".join(job["nodes"]),
                          "-o", "%i|%u|%P|%j|%N|%e"])
    mine = set(own(job, run=run) or [])
    found = [tuple(line.split("|")) for line in out.splitlines() if line.count("|") == 5] if status == 0 else []
    return [h for h in found if h[0] not in mine and h[1] != job["user"]]


def holders(job, run=None):
    """(the tier's own pending job id, SLURM's reason, its start estimate, [(id, user, partition, name, nodes, end)]
    of other users' jobs that run on the nodes it may use) while it waits for them; None when it does not (it runs, or
    it is pending for another reason: a limit, a drained node, its own previous job still ending)."""
    run = run or command  # looked up when called: the tests put a fake SLURM there
    pending = own(job, "%i|%r|%S", "PENDING", run)
    if not pending:
        return None
    job_id, reason, start = (pending[0].split("|") + ["", ""])[:3]
    if reason not in WAITS_FOR_NODES:
        return None
    found = held_by_others(job, run)
    return (job_id, reason, start if start not in ("", "N/A", "NONE") else None, found) if found else None


def preempted(job, run=None, now=time.time):
    """(the newest recorded id, when it was preempted, [holders as above]) when the tier has no job in the queue and
    SLURM preempted that job in the last PREEMPTED_RECENT_S: the keeper submits it again within its interval, and the
    new job waits for the preemptor (running on its nodes, or about to start there: the holders may be none yet).
    SLURM's PreemptTime tells, not its state (FAILED or CANCELLED after the grace time). None otherwise: it ended
    another way, long ago, or SLURM forgot it."""
    run = run or command  # looked up when called: the tests put a fake SLURM there
    ids = recorded(job)
    if not ids or own(job, run=run) != []:
        return None
    status, out, _ = run(["scontrol", "-o", "show", "job", ids[-1]])
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f) if status == 0 else {}
    at = epoch(fields.get("PreemptTime"))
    if at is None or not 0 <= now() - at <= PREEMPTED_RECENT_S:
        return None
    return ids[-1], fields["PreemptTime"], held_by_others(job, run)


def named(found):
    """The holding jobs as one phrase (the first four, and how many more)."""
    phrase = "; ".join("job {} ({}, user {}, partition {}) on {} until {}".format(
        i, name, user, part, nodes, end if end not in ("", "N/A", "NONE") else "no end time")
        for i, user, part, name, nodes, end in found[:4])
    return phrase + (" and {} more".format(len(found) - 4) if len(found) > 4 else "")


def waiting(job, run=None):
    """Why the tier's own job waits for nodes other jobs hold, as one line; None when it does not. A job those jobs
    just preempted, not yet submitted again by the keeper, waits too."""
    held = holders(job, run)
    if held is None:
        gone = preempted(job, run)
        if gone is None:
            return None
        job_id, at, found = gone
        by = named(found) if found else "the job that preempted it starts there now"
        return "job {} was preempted at {} by other jobs on its nodes: {}; the keeper submits it again to wait for " \
            "them".format(job_id, at, by)
    job_id, reason, start, found = held
    when = "SLURM expects it to start at {}".format(start) if start else "SLURM gives no start estimate yet"
    return "job {} pending ({}) while other jobs hold its nodes: {}; {}".format(job_id, reason, named(found), when)


def digest(job, chars):
    with open(job["script"], "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:chars]


def submit(job, chars, options=(), run=None):
    """sbatch the tier's script with its digest as the comment and record the job's id: (id, None) or (None, why)."""
    run = run or command  # looked up when called: the tests put a fake SLURM there
    status, out, err = run(["sbatch", "--parsable", "--comment=" + digest(job, chars)] + list(options)
                           + [job["script"]])
    job_id = out.strip().split(";")[0]
    if status != 0 or not job_id.isdigit():
        return None, "sbatch exited {}: {}".format(status, (err or out).strip()[-300:])
    record(job, job_id)
    return job_id, None


def cancel(job, only=None, wait_s=0, run=None, sleep=time.sleep, clock=time.monotonic):
    """scancel the tier's own jobs (or `only`, when it is one of them) as its user, then wait up to wait_s (0: not at
    all) until they left the queue. (ids cancelled, None) or (ids, why not)."""
    run = run or command  # looked up when called: the tests put a fake SLURM there
    ids = own(job, run=run)
    if ids is None:
        return [], "squeue failed"
    ids = [i.strip() for i in ids if only is None or i.strip() == str(only)]
    if not ids:
        return [], None
    status, _, err = run(["scancel", "--user=" + job["user"]] + ids)
    # a job that ended between squeue and scancel ("Invalid job id specified") is done, though squeue may list it
    # a moment longer (seen on the SLURM lab in CI); one still listed after LEAVING_S is a failure
    leaving = clock() + LEAVING_S
    while status != 0:
        left = own(job, run=run)
        if left is not None and not set(ids) & {i.strip() for i in left}:
            break
        if clock() >= leaving:
            return ids, "scancel exited {}: {}".format(status, err.strip()[-300:])
        sleep(0.5)
    if wait_s <= 0:  # asked not to wait: SLURM ends them (a job may stay COMPLETING for its grace time)
        return ids, None
    deadline = clock() + wait_s
    while True:
        left = set(ids) & {i.strip() for i in (own(job, run=run) or [])}
        if not left:
            return ids, None
        if clock() >= deadline:
            return ids, "still in the queue after {} s: job(s) {}".format(wait_s, " ".join(sorted(left)))
        sleep(1)


def options(argv, known):
    """Split `-x VALUE` options out of argv: ({option: value}, the rest); None where an option has no value."""
    found, rest, i = {}, [], 0
    while i < len(argv):
        if argv[i] in known:
            if i + 1 == len(argv):
                return None
            found[argv[i]] = argv[i + 1]
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    return found, rest


def usage(message):
    print("clusterbook-jobs: {}\n{}".format(message, __doc__.split("\n\n")[2]), file=sys.stderr)
    return 2


def failed(job, why):
    print("clusterbook-jobs: {}: {}".format(job["job"], why), file=sys.stderr)
    return 1


def main(argv, out=sys.stdout, run=None):
    """The command line; returns the exit status: 0 done, 1 SLURM failed or refused, 2 a usage error."""
    if len(argv) < 3:
        return usage("CONFIG, COMMAND and TIER are needed")
    with open(argv[0]) as f:
        config = json.load(f)
    what, tier, rest = argv[1], argv[2], argv[3:]
    job = next((j for j in config["jobs"] if j["tier"] == tier), None)
    if job is None:
        return usage("no SLURM tier {!r} in {}".format(tier, argv[0]))
    if what == "submit":
        job_id, why = submit(job, config["digest_chars"], rest, run)
        print(job_id or "", file=out)
        return failed(job, why) if why else 0
    parsed = options(rest, {"squeue": ("-t", "-o"), "cancel": ("--wait",)}.get(what, ()))
    if what not in ("squeue", "others", "cancel", "waiting") or parsed is None:
        return usage("{} {}: not a command or its options".format(what, " ".join(rest)))
    opts, extra = parsed
    if what == "cancel":
        if len(extra) > 1 or not all(x.isdigit() for x in extra + [opts.get("--wait", "0")]):
            return usage("cancel takes at most one job id and --wait SECONDS")
        ids, why = cancel(job, extra[0] if extra else None, int(opts.get("--wait", "0")), run)
        for job_id in ids:
            print("cancelled job {}".format(job_id), file=out)
        return failed(job, why) if why else 0
    if extra:
        return usage("{} takes no {}".format(what, " ".join(extra)))
    if what == "waiting":
        why = waiting(job, run)
        if why:
            print(why, file=out)
        return 0 if why else 1
    lines = own(job, opts.get("-o", "%i"), opts.get("-t"), run) if what == "squeue" else others(job, run)
    if lines is None:
        return failed(job, "squeue failed")
    for line in lines:
        print(line, file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
