"""A fake of SLURM's squeue, sbatch and scancel (and logger) for the node programs' tests: a queue of jobs, each with
an id, a user, a name, a state, a reason and a comment. `command` has the node programs' signature: (exit status,
stdout, stderr). Only what the programs ask is modelled: squeue's -h -n -t -o (%i %u %T %r %k %N), sbatch's
--parsable --comment and the script (named by its file), scancel's --user and ids, `scontrol -o show job ID` of
jobs that left the queue (`ended`: id to when it was preempted or None, as slurmctld remembers them for MinJobAge)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Job:
    id: str
    user: str
    name: str
    state: str = "PENDING"
    reason: str = "None"
    comment: str = ""
    nodes: str = ""
    partition: str = "ai"
    start: str = "N/A"  # a pending job's expected start; a running job's end


@dataclass
class Slurm:
    user: str = "root"  # who runs the commands (sbatch's jobs are this user's; scancel --user must be this one too)
    jobs: list[Job] = field(default_factory=list)
    next_id: int = 100
    journal: list[str] = field(default_factory=list)
    submitted: list[list[str]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    fails: set[str] = field(default_factory=set)  # commands that exit 1 (e.g. {"sbatch"} while slurmctld is down)
    ended: dict[str, str] = field(default_factory=dict)  # jobs out of the queue: id -> PreemptTime ("None": not)

    def add(self, name: str, user: str, state: str = "PENDING", reason: str = "None", comment: str = "") -> str:
        """Another submission (another user's, or one the test makes); its id."""
        self.next_id += 1
        self.jobs.append(Job(str(self.next_id), user, name, state, reason, comment))
        return str(self.next_id)

    def command(self, argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
        name = argv[0]
        if name in self.fails:
            return 1, "", f"{name}: error: Unable to contact slurm controller (connect failure)"
        if name == "squeue":
            return self.squeue(argv[1:])
        if name == "sbatch":
            return self.sbatch(argv[1:])
        if name == "scancel":
            return self.scancel(argv[1:])
        if name == "scontrol":
            return self.scontrol(argv[1:])
        if name == "logger":
            self.journal.append(argv[-1])
            return 0, "", ""
        raise AssertionError(argv)

    def squeue(self, args: list[str]) -> tuple[int, str, str]:
        opts = dict(zip(args[1::2], args[2::2])) if args[:1] == ["-h"] else {}
        assert args[:1] == ["-h"] and set(opts) <= {"-n", "-t", "-o", "-w"}, args
        states = set(opts.get("-t", "").split(",")) - {""}
        nodes = set(opts.get("-w", "").split(",")) - {""}
        fields = {"i": "id", "u": "user", "T": "state", "r": "reason", "k": "comment", "N": "nodes", "P": "partition",
                  "j": "name", "S": "start", "e": "start"}
        lines = [re.sub(r"%([iuTrkNPjSe])", lambda m, j=j: getattr(j, fields[m.group(1)]), opts.get("-o", "%i"))
                 for j in self.jobs if j.name == opts.get("-n", j.name) and (not states or j.state in states)
                 and (not nodes or nodes & set(j.nodes.split(",")))]
        return 0, "".join(line + "\n" for line in lines), ""

    def scontrol(self, args: list[str]) -> tuple[int, str, str]:
        assert args[:3] == ["-o", "show", "job"] and len(args) == 4, args
        if args[3] in self.ended:  # a preempted job ends FAILED or CANCELLED after its grace time: only the time tells
            state, preempted = ("FAILED", self.ended[args[3]])
        else:
            state, preempted = next(((j.state, "None") for j in self.jobs if j.id == args[3]), (None, None))
        if state is None:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        return 0, (f"JobId={args[3]} JobName=x UserId=root(0) JobState={state} Reason=None PreemptTime={preempted} "
                   "SuspendTime=None\n"), ""

    def sbatch(self, args: list[str]) -> tuple[int, str, str]:
        self.submitted.append(args)
        comment = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), "")
        job_name = args[-1].rsplit("/", 1)[-1].removesuffix(".sbatch")  # the tiers' #SBATCH --job-name
        return 0, self.add(job_name, self.user, comment=comment) + "\n", ""

    def scancel(self, args: list[str]) -> tuple[int, str, str]:
        users = [a.split("=", 1)[1] for a in args if a.startswith("--user=")]
        ids = [a for a in args if a.isdigit()]
        assert users == [self.user] and ids and len(ids) + 1 == len(args), f"scancel {args}: by id and user only"
        for job in [j for j in self.jobs if j.id in ids and j.user == self.user]:
            self.jobs.remove(job)
            self.cancelled.append(job.id)
        return 0, "", ""


def local_jobs_command(tmp_path, c, recorded: dict[str, list[str]] | None = None):
    """The controller's clusterbook-jobs for commands run here with bash: the real node/slurm_jobs.py with the
    cluster's keeper configuration, its marks in tmp_path (each tier's ids as given). Returns a function that points a
    command at it (the command's fakes of squeue, sbatch and scancel come first on PATH)."""
    import json
    import sys
    from pathlib import Path

    import clusterbook.node
    from clusterbook.pure import layout
    from clusterbook.pure.render.node_config import keeper_config

    config = json.loads(keeper_config(c))
    for job in config["jobs"]:
        job["marks"] = {m: str(tmp_path / Path(p).name) for m, p in job["marks"].items()}
        ids = (recorded or {}).get(job["tier"])
        if ids:
            Path(job["marks"]["ids"]).write_text("".join(f"{i}\n" for i in ids))
    (tmp_path / "keeper.json").write_text(json.dumps(config))
    program = Path(clusterbook.node.__file__).parent / "slurm_jobs.py"
    wrapper = tmp_path / "clusterbook-jobs"
    wrapper.write_text(f"#!/bin/bash\nexec {sys.executable} {program} {tmp_path / 'keeper.json'} \"$@\"\n")
    wrapper.chmod(0o755)
    return lambda command: command.replace(layout.path(c, "jobs"), str(wrapper))
