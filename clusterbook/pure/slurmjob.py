"""A SLURM tier's job from the controller's side: submit it with its script's digest as the job's comment (one rule
for Python, the runbooks and the keeper), wait until it serves, and until the gateway points at it."""

from __future__ import annotations

import hashlib

from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import layout
from clusterbook.pure import topology as topo

DIGEST_CHARS = 16  # the job's --comment: the first 16 hex digits of its script's sha256
NICE_PER_NODE = 10  # the job's --nice for each node it asks beyond one
WAITING = "waiting:"  # what the serving wait prints while other jobs (VASP's) hold the tier's nodes: no failure
CANCEL_WAIT_S = 120  # how long a deploy or restart waits for the tier's cancelled job to leave the queue


def job_nice(tier: Tier) -> int:
    """A tier job asking more nodes waits behind one asking fewer. SLURM's main scheduling pass stops at the first
    job of a partition that cannot start: after a preemption, the RPC tier's new job (waiting for the taken node)
    kept the router tier's, which could start on a free node at once, waiting 12 s for the backfill pass (lab,
    2026-11-29). Positive only: a user may lower a job's priority, not raise it."""
    return NICE_PER_NODE * (len(tier.nodes) - 1)


def script_digest(text: str) -> str:
    """The comment a job running this script carries."""
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def digest_shell(script: str) -> str:
    """The same digest computed on the node (`script` is a shell word: a path or a quoted variable)."""
    return f"$(sha256sum {script} | cut -c1-{DIGEST_CHARS})"


def sbatch_shell(script: str) -> str:
    """sbatch a script with its digest as the job's comment; prints the job id."""
    return f'sbatch --parsable --comment="{digest_shell(script)}" {script}'


# the marks of a SLURM tier's job, files <job>.<mark> in the keeper's folder, the node programs' too: wanted (the keeper
# keeps a job), released (the keeper released an idle tier on demand), request (the wake service's last request),
# lock (one submission at a time), tries (the keeper's count of jobs in a row that ended without serving, and when),
# completing (since when the keeper has seen the job only COMPLETING), ids (the ids of the jobs clusterbook submitted:
# node/slurm_jobs.py finds the tier's own jobs by them and by user, never by the name alone), waiting (while the job
# waits for nodes other jobs hold: who, and until when SLURM expects; the hold answers with it)
MARKS = ("wanted", "released", "request", "lock", "tries", "completing", "ids", "waiting")
DEMAND_MARKS = ("wanted", "released", "request")  # the unprivileged hold service writes these (layout.DEMAND_DIR)


def marker(c: Cluster, tier: Tier, mark: str) -> str:
    """A mark's file (MARKS): the hold service's in the demand folder, the others beside the batch scripts."""
    if mark not in MARKS:
        raise ValueError(mark)
    folder = layout.DEMAND_DIR if mark in DEMAND_MARKS else layout.keeper_marker_dir(c)
    return f"{folder}/{topo.units(tier).job}.{mark}"


def keeper_mark(c: Cluster, tier: Tier, state: str) -> tuple[str, str, str]:
    """(command, unless, label) that marks a tier wanted (a tier on demand left released: its next request starts
    it) or removes its marks (the keeper leaves it stopped, and a request does not start it)."""
    wanted, released, job = marker(c, tier, "wanted"), marker(c, tier, "released"), topo.units(tier).job
    if state == "unmarked":
        return (f"rm -f {wanted} {released}", f"! test -e {wanted} && ! test -e {released}",
                f"unmark {job} (the keeper leaves it stopped, and a request does not start it)")
    on_demand = " (unless released on demand: its next request starts it)" if tier.on_demand else ""
    return (f"mkdir -p {layout.keeper_marker_dir(c)} {layout.DEMAND_DIR} && rm -f {released} && touch {wanted}",
            f"test -e {wanted}" + (f" || test -e {released}" if tier.on_demand else ""),
            f"mark {job} wanted{on_demand}")


def _unless_released(c: Cluster, tier: Tier) -> str:
    """A shell test, true when an on-demand tier is released: a deploy changes its files and starts nothing."""
    return f"test -e {marker(c, tier, 'released')}" if tier.on_demand else "false"


def jobs(c: Cluster, tier: Tier, command: str, *args: str) -> str:
    """A shell command over the tier's own jobs (node/slurm_jobs.py on the controller): `submit`, `squeue`, `cancel`
    or `others`; args are shell words (a format with spaces comes quoted)."""
    return " ".join([layout.path(c, "jobs"), command, tier.name, *args])


def submit(c: Cluster, tier: Tier, replace: str) -> tuple[str, str | None, str]:
    """(command, unless, label) that submits the tier's job. The old job is cancelled and the new one submitted
    under the keeper's lock of the job (the keeper takes the same lock, so it cannot submit a second job in
    between); the tier stays marked wanted throughout, so the gateway holds its requests for the new job, and is
    unmarked only when sbatch refuses the new one. Only the tier's own jobs are cancelled or looked at (by recorded
    id and user); a job of another user that took its name is named and left alone. replace `older`: skipped when a
    job already runs this very script, `always`: the running job is cancelled and submitted again (a restart)."""
    script, wanted = layout.sbatch_path(c, tier), marker(c, tier, "wanted")
    others = jobs(c, tier, "others")
    command = (f"mkdir -p {layout.keeper_marker_dir(c)} && (flock -w 120 9; {others} | sed 's/^/not its own, "
               f"left alone: job /'; {jobs(c, tier, 'cancel', '--wait', str(CANCEL_WAIT_S))} >/dev/null || exit 1; "
               f"if {jobs(c, tier, 'submit')}; then touch {wanted}; else rm -f {wanted}; exit 1; fi) "
               f"9>{marker(c, tier, 'lock')}")
    if replace == "always":  # a restart starts a released tier too
        command = (f"rm -f {marker(c, tier, 'released')}; " if tier.on_demand else "") + command
        return command, None, f"sbatch {script} (cancelling its running job first)"
    unless = f'test "$({jobs(c, tier, "squeue", "-o", "%k")})" = "{digest_shell(script)}"'
    if tier.on_demand:
        unless = f"{_unless_released(c, tier)} || {unless}"
    released = ", or the tier is released on demand" if tier.on_demand else ""
    return (command, unless, f"sbatch {script} (unless its job runs this very script{released}; its job on an older "
            "one is cancelled first)")


def serving(c: Cluster, tier: Tier) -> tuple[str, str]:
    """(command, label): prints `serving: …` once the job runs and its registered endpoint answers /health,
    `waiting: …` while its job is pending because other jobs hold its nodes (beefcake2's VASP: a normal day, not a
    failure; the line names them and SLURM's estimate), and `exited: …` when the job left the queue before that."""
    job, where = topo.units(tier).job, jobs(c, tier, "squeue", "-o", "'%i on %N'")
    released = (f"if {_unless_released(c, tier)}; then echo \"serving: released on demand (its next request "
                f"starts it)\"; exit 0; fi; ") if tier.on_demand else ""
    command = (f"{released}rec={c.storage.endpoint_dir}/{tier.name}.json; host=$(jq -r .host \"$rec\" 2>/dev/null); "
               f"port=$(jq -r .port \"$rec\" 2>/dev/null); "
               f"if [ -n \"$host\" ] && curl -sf -o /dev/null -m 5 \"http://$host:$port/health\"; then "
               f"echo \"serving: job $({where}) at http://$host:$port\"; "
               f"elif why=$({jobs(c, tier, 'waiting')}); then echo \"{WAITING} $why\"; "
               f"elif ! {jobs(c, tier, 'squeue')} | grep -q .; then echo \"exited: job {job} left the queue before its "
               f"endpoint answered (invoke logs --tier {tier.name} shows why)\"; fi")
    return command, f"job {job} running and registered in {c.storage.endpoint_dir}"


def gateway_points_at(c: Cluster, tier: Tier) -> tuple[str, str]:
    """(command, label): rewrite the gateway's upstreams now and print `gateway: …` once the tier's route answers
    /health (or once it is clear the gateway is not deployed yet, or has no route to the tier yet)."""
    route = next(r for r in c.gateway.routes if r.tier == tier.name)
    updater, url = layout.path(c, "updater"), f"http://{c.gateway.listen[0]}:{route.port}"
    released = (f"if {_unless_released(c, tier)}; then echo \"gateway: {tier.name} released on demand: not "
                f"asked (a request would start it)\"; exit 0; fi; ") if tier.on_demand else ""
    site = layout.path(c, "nginx_site")  # a tier new to the file: the gateway's site has no route to it yet
    command = (f"{released}if [ -x {updater} ] && systemctl is-active --quiet nginx; then "
               f"if ! grep -qs 'listen {c.gateway.listen[0]}:{route.port};' {site}; then echo \"gateway: no route to "
               f"{tier.name} yet (invoke deploy.gateway adds it)\"; exit 0; fi; {updater} >/dev/null && "
               f"curl -sf -o /dev/null -m 5 {url}/health && echo \"gateway: {url} serves {tier.name}\"; "
               f"else echo \"gateway: not deployed yet\"; fi")
    return command, f"rewrite the upstreams and wait until the gateway answers for {tier.name}"
