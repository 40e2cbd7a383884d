"""The recovery benchmark: disrupt a live tier (SIGKILL an RPC worker, or restart its head), ask it for a chat
completion as a client would until it answers, and time each phase from the nodes' logs and the client's side."""

from __future__ import annotations

import shlex
import threading
import time
from dataclasses import dataclass, field

import httpx

from clusterbook.effects import probes
from clusterbook.effects.console import Failed
from clusterbook.model.schema import Cluster, RpcTier, Tier
from clusterbook.pure import slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.recoverylog import journal_phases, last_load_s

CASES = ("worker killed", "head restarted")  # bench.recovery's; disrupt also knows bench.faults' (faults.py)
PREEMPTOR = "clusterbook-preemptor"  # the job name of the higher-priority job a preemption is done with
PAGE_CACHE = ("warm", "cold")
SETTLE_S = 3  # between a tier answering and the next disruption


@dataclass
class RecoveryRun:
    """One disruption and what followed, in seconds after it."""

    case: str  # one of CASES
    page_cache: str  # the model file in the head node's page cache when the head loads again: warm or cold
    phases: dict[str, float] = field(default_factory=dict)
    clients_saw: dict[str, int] = field(default_factory=dict)  # what the polling client got meanwhile, counted
    error: str = ""
    load_s: float | None = None  # the head's last load: its log lines "loading model" to "model loaded"
    resident_after_eviction: float | None = None  # cold runs: the share of the file the evictor left in memory

    @property
    def answered_s(self) -> float | None:
        return self.phases.get("first answer")

    def to_json(self) -> dict:
        return {"case": self.case, "page_cache": self.page_cache, "phases": self.phases,
                "answered_s": self.answered_s, "load_s": self.load_s, "clients_saw": self.clients_saw,
                "resident_after_eviction": self.resident_after_eviction,
                "error": self.error}


def _node_time(result) -> float:
    return float(result.stdout.split()[0])


def disrupt(c: Cluster, transport, tier: Tier, case: str) -> float:
    """Do the disruption; the node's clock when it happened (the logs' timeline)."""
    now = "date +%s.%N"
    if case == "head killed":  # SIGKILL to the server: systemd restarts its unit, the job's supervisor its step
        binary = c.engine.server_binary
        command = f"{now}; pkill -KILL -f '[{binary[0]}]{binary[1:]} .*--port {tier.port}'"
        node = tier.head
        if tier.manager == "slurm" and tier.floats:  # a router tier's job may run elsewhere
            where = transport.run(c.slurm_controller, slurmjob.jobs(c, tier, "squeue", "-t", "RUNNING", "-o", "%N")
                                  + " | head -n 1")
            node = where.stdout.strip() or node
    elif tier.manager == "slurm":
        if case == "worker killed":
            binary = c.engine.rpc_worker_binary  # [x]yz: the pattern does not match the shell running pkill
            command = f"{now}; pkill -KILL -f '[{binary[0]}]{binary[1:]} .*--port {tier.rpc_port}'"
            node = tier.workers[0]
        elif case == "preempted":  # a job of the partition that preempts the tiers takes the tier's node whole;
            job = shlex.quote(topo.units(tier).job)  # the fault is when SLURM ends the tier's job (it decides
            partition = shlex.quote(preempting_partition(c) or "")  # within seconds, or half a minute)
            running = slurmjob.jobs(c, tier, "squeue", "-t", "RUNNING", "-o", "'%i %N'")
            command = (f"set -- $({running} | head -1); "
                       f"test -n \"$2\" || {{ echo 'job {job} is not running' >&2; exit 1; }}; "
                       f"sbatch --parsable -p {partition} -w \"$2\" --exclusive --job-name={PREEMPTOR} "
                       "--wrap 'sleep 900' >/dev/null || exit 1; for i in $(seq 240); do "
                       f"squeue -h -j \"$1\" -t RUNNING -o %i 2>/dev/null | grep -q . || {{ {now}; exit 0; }}; "
                       "sleep 0.5; done; echo \"job $1 was still running 120 s after its node was asked for\" >&2; "
                       "exit 1")
            node = c.slurm_controller
        else:  # the job ends and comes back as the tier says: SLURM's requeue, or the keeper's new submission
            ends = "scontrol requeue" if tier.slurm.requeue else "scancel"
            command = f"{now}; {ends} $({slurmjob.jobs(c, tier, 'squeue', '-t', 'RUNNING')} | head -1)"
            node = c.slurm_controller
    elif case == "worker killed":
        unit = topo.units(tier).worker
        command = f"{now}; kill -9 $(systemctl show -p MainPID --value {unit})"
        node = tier.workers[0]
    else:
        command = f"{now}; systemctl restart --no-block {topo.units(tier).head}"
        node = tier.head
    result = transport.run(node, command)
    if not result.ok:
        raise Failed(f"{node}: {case}: `{command}` exited {result.returncode}: {result.tail()}")
    return _node_time(result)


def preempting_partition(c: Cluster) -> str | None:
    """The partition whose jobs preempt the tiers' (the highest PriorityTier), where clusterbook configures SLURM."""
    if not c.slurm:
        return None
    high = max(c.slurm.partitions, key=lambda p: p.priority_tier)
    return high.name if any(p.priority_tier < high.priority_tier for p in c.slurm.partitions) else None


def end_preemption(c: Cluster, transport) -> None:
    """End the higher-priority job a preemption was done with: its node is the tiers' again."""
    command = f"scancel --user={c.access.user} -n {PREEMPTOR}"  # its own: a job name is anyone's
    result = transport.run(c.slurm_controller, command)
    if not result.ok:
        raise Failed(f"{c.slurm_controller}: `{command}` exited {result.returncode}: {result.tail()}")


EVICTED = "/run/clusterbook-bench-evicted"  # what the evictor left on the head node: resident pages after it ran


def evict_when_head_exits(c: Cluster, transport, tier: RpcTier) -> None:
    """Drop the model file from the head node's page cache the moment the running head exits (pages a process has
    mapped cannot be dropped), so the next head reads it from disk; detached, it outlives this SSH command."""
    path = shlex.quote(f"{c.storage.models_dir}/{c.model(tier.model).file}")
    head = f"[{c.engine.server_binary[0]}]{c.engine.server_binary[1:]} .*--port {tier.port}"
    # after the exit, drop again until under 5 % is resident (a core dump or readahead can bring pages back), for at
    # most about a second: the next head must not be kept waiting. The figure kept is the loop's last reading: a
    # reading after it also counted what the next head had read by then (10 % once, on a busy machine)
    script = (f"pid=$(pgrep -o -f '{head}'); while kill -0 $pid 2>/dev/null; do sleep 0.01; done; left=unknown; "
              f"for _ in $(seq 50); do dd if={path} iflag=nocache count=0 status=none; "
              f"set -- $(fincore -nb -o RES,SIZE {path} 2>/dev/null); [ -n \"$2\" ] && left=\"$1 $2\"; "
              "[ -n \"$2\" ] && [ $(($1 * 20)) -lt \"$2\" ] && break; sleep 0.02; done; "
              f"echo \"$left\" > {EVICTED}")
    result = transport.run(tier.head, f"rm -f {EVICTED}; setsid sh -c {shlex.quote(script)} "
                                      "</dev/null >/dev/null 2>&1 &")
    if not result.ok:
        raise RuntimeError(f"{tier.head}: could not start the page cache evictor: {result.tail()}")


def evicted_share(transport, tier: RpcTier) -> float | None:
    """The share of the model file still resident right after the evictor ran (None: unknown)."""
    fields = transport.run(tier.head, f"cat {EVICTED} 2>/dev/null").stdout.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields) or not int(fields[1]):
        return None
    return round(int(fields[0]) / int(fields[1]), 3)


def client_url(c: Cluster, transport, tier: RpcTier) -> str | None:
    """Where a client asks: through the gateway if it routes the tier, else the tier's endpoint (for a SLURM tier,
    wherever its job registered; None while no job is registered)."""
    url = topo.client_url(c, tier)
    if url != topo.endpoint_url(c, tier) or tier.manager != "slurm":
        return url
    record = probes.registered_endpoint(transport, c, tier)
    return f"http://{record['host']}:{record['port']}" if record else None


def _job_state(c: Cluster, transport, tier: RpcTier) -> str:
    out = transport.run(c.slurm_controller, slurmjob.jobs(c, tier, "squeue", "-o", "%T")).stdout
    return (out.split() or ["none"])[0]


def _ask(url: str | None, model: str, key: str | None) -> str:
    """One short chat completion: "200", another status code, or the exception's name."""
    if url is None:
        return "no endpoint registered"
    try:
        probes.chat(url, model, key, max_tokens=4, timeout=30)
        return "200"
    except httpx.HTTPStatusError as exc:
        return str(exc.response.status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


def until_answered(c: Cluster, transport, tier: RpcTier, started: float, limit_s: float,
                   progress=lambda text: None) -> tuple[dict[str, float], dict[str, int]]:
    """Poll as a client (and, for a SLURM tier, the job's state, beside it: the gateway holds a client's request
    while the job is away) until the tier answers; the phases seen from here, in seconds after `started`
    (time.monotonic), and what the client got meanwhile."""
    key = probes.api_key(transport, c, tier)
    phases: dict[str, float] = {}
    saw: dict[str, int] = {}
    answered = threading.Event()

    def watch_job() -> None:
        while not answered.is_set() and time.monotonic() - started < limit_s:
            since = round(time.monotonic() - started, 2)
            state = _job_state(c, transport, tier)
            if state != "RUNNING" and "job left running" not in phases:
                phases["job left running"] = since
            if state == "RUNNING" and "job left running" in phases:
                phases.setdefault("job running", since)
            progress(f"{since:.0f} s: job {state.lower()}")
            answered.wait(0.25)
    watcher = threading.Thread(target=watch_job, daemon=True) if tier.manager == "slurm" else None
    if watcher:
        watcher.start()
    try:
        while time.monotonic() - started < limit_s:
            outcome = _ask(client_url(c, transport, tier), tier.served_models[0], key)
            saw[outcome] = saw.get(outcome, 0) + 1
            if outcome == "200":
                phases["first answer"] = round(time.monotonic() - started, 2)
                return phases, saw
            progress(f"{time.monotonic() - started:.0f} s: {outcome}")
            time.sleep(0.25)
    finally:
        answered.set()
        if watcher:
            watcher.join(5)
    raise TimeoutError(f"tier {tier.name} did not answer within {limit_s:g} s (clients saw {saw})")


def journal_since(transport, node: str, unit: str, t0: float) -> str:
    return transport.run(node, f"journalctl -u {unit} --since @{int(t0)} -o short-unix --no-pager").stdout


def slurm_head_load_s(c: Cluster, transport, tier: RpcTier, wait_s: float = 10) -> float | None:
    """The last load in the head step's log of the job that runs now. The job that answered may not have
    registered its endpoint yet (the gateway reaches the same host and port): the running job is asked of SLURM,
    and its log read again for a few seconds until it holds the load."""
    units = topo.units(tier)
    deadline = time.monotonic() + wait_s
    while True:
        job = transport.run(c.slurm_controller, slurmjob.jobs(c, tier, "squeue", "-t", "RUNNING")).stdout.split()
        if job:
            log = f"{c.storage.log_dir}/{units.job}-{job[0]}-head.log"
            load = last_load_s(transport.run(tier.head, f"tail -n 2000 {shlex.quote(log)}").stdout)
            if load is not None:
                return load
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def run_case(c: Cluster, transport, tier: RpcTier, case: str, page_cache: str, limit_s: float,
             progress=lambda text: None) -> RecoveryRun:
    """One disruption of a tier that answers now, and its recovery."""
    run = RecoveryRun(case, page_cache)
    try:  # each run starts from a tier that answers, its last recovery settled
        until_answered(c, transport, tier, time.monotonic(), limit_s)
        time.sleep(SETTLE_S)
    except TimeoutError as exc:
        run.error = f"before the disruption: {exc}"
        return run
    if page_cache == "cold":
        evict_when_head_exits(c, transport, tier)
    t0 = disrupt(c, transport, tier, case)
    started = time.monotonic()
    try:
        seen, run.clients_saw = until_answered(c, transport, tier, started, limit_s, progress)
    except TimeoutError as exc:
        run.error = str(exc)
        return run
    units = topo.units(tier)
    if tier.manager == "systemd":
        run.phases.update(journal_phases({"head": journal_since(transport, tier.head, units.head, t0),
                                          "worker": journal_since(transport, tier.workers[0], units.worker, t0)},
                                         t0))
        if "loading" in run.phases and "model loaded" in run.phases:
            run.load_s = round(run.phases["model loaded"] - run.phases["loading"], 3)
    else:  # the head step's own file: a requeued job appends to it, and its times count from each process's start
        run.load_s = slurm_head_load_s(c, transport, tier)
    run.phases.update(seen)
    if page_cache == "cold":
        run.resident_after_eviction = evicted_share(transport, tier)
    return run
