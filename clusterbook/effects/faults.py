"""The faults benchmark: clients send chat completions through the gateway (half of them streaming) while one fault
is done to the tier; every request's outcome and time, the streams the gateway resumed, and the added latency."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from clusterbook.effects.console import Failed
from clusterbook.effects.recovery import disrupt, end_preemption, preempting_partition
from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import slurmjob
from clusterbook.pure import topology as topo

RESUMED = ": clusterbook: the stream resumed"  # the SSE comment the hold service writes where it continued a stream
BEFORE_S = 3  # clients run this long before the fault (the baseline) and after the tier answers again
NEW_JOB_FAULTS = ("job ended", "preempted")  # the tier comes back in a new SLURM job: the new job's hold and prediction
OVERLOAD_EXTRA = 20  # requests beyond what a tier admits, sent at once with the admitted ones: told 429 at once
ADDED_P99_MARGIN_S = 2  # issue 46's target: a fault adds at most the predicted recovery and this to the p99
QUIET_FAULTS = ("released",)  # done while the clients send nothing (a tier is released only when idle)
CONTROL = "none (control)"  # the same clients and measurement with nothing done: what the figures vary by alone
GATEWAY_TIME = "x-clusterbook-gateway-time"  # nginx's $request_time on a 429 (seconds, to the millisecond)


def faults_for(c: Cluster, tier: Tier) -> tuple[str, ...]:
    """The faults a tier can be given: its server killed, an RPC worker killed; under SLURM its job ended (as a
    preemption ends a job that is not requeued: the keeper submits a new one), and a single-node tier preempted by a
    job of the partition that preempts it (where clusterbook configures SLURM): it moves to another node, and the
    preemptor is ended once the tier answers again. A tier on demand is also released as its keeper releases it
    when idle, and its clients' next requests wake it. The control does nothing, for the noise beside them."""
    slurm = tier.manager == "slurm"
    return (CONTROL,) + (("worker killed",) if tier.workers else ()) + ("head killed",) + \
        (("job ended",) if slurm else ()) + \
        (("preempted",) if slurm and tier.floats and preempting_partition(c) else ()) + \
        (("released",) if tier.on_demand else ()) + ("overload",)


def release(c: Cluster, transport, tier: Tier, limit_s: float) -> None:
    """Release an idle tier on demand as its keeper does once its idle time passed (the wake service marks it
    released when nothing is in flight, then its job is cancelled), and wait until the job has left the queue."""
    job = topo.units(tier).job
    url = f"http://127.0.0.1:{c.gateway.wake_port}/release/{tier.name}?idle_s=0"
    # "not serving": its keeper released it first (the clients were quiet past its idle time): the same fault
    command = (f"for i in $(seq 20); do out=$(curl -sS -m 20 '{url}'); case \"$out\" in "
               f"*'\"released\": true'*|*'\"not serving\"'*) exec {slurmjob.jobs(c, tier, 'cancel')};; esac; "
               "sleep 0.5; done; "
               "echo \"the wake service did not release it: $out\" >&2; exit 1")  # llama-server's metrics lag
    result = transport.run(c.keeper_node, command)
    if not result.ok:
        raise Failed(f"{c.keeper_node}: released: `{command}` exited {result.returncode}: {result.tail()}")
    started = time.monotonic()
    while transport.run(c.slurm_controller, slurmjob.jobs(c, tier, "squeue")).stdout.strip():
        if time.monotonic() - started > limit_s:
            raise Failed(f"released: job {job} still in the queue after {limit_s:.0f} s")
        time.sleep(1)


@dataclass
class Request:
    """One client request: when it was sent (seconds from the fault), what came of it, how long it took."""

    sent_s: float
    stream: bool
    outcome: str  # "ok", or the status code or error that the client saw
    took_s: float
    resumed: bool = False
    why: str = ""  # a failed request: the start of what it was told
    warmup: bool = False  # a client's first: all were sent at once, queued as the steady load never is (no latency)


@dataclass
class FaultRun:
    """One fault and the requests around it."""

    fault: str
    clients: int
    requests: list[Request] = field(default_factory=list)
    back_s: float | None = None  # the first request sent after the fault that was answered, sent this long after

    @property
    def failed(self) -> list[Request]:
        return [r for r in self.requests if r.outcome != "ok"]

    def latency(self, during: bool) -> dict[str, float | None]:
        """p50 and p99 of the answered requests' times: during the fault (in flight at it, or sent before the tier
        was back) or outside it (the baseline: the steady queue's requests that ended before the fault; where none
        did, those sent once the tier was back, which may still wait behind the fault's backlog)."""
        end = self.back_s if self.back_s is not None else float("inf")
        answered = [r for r in self.requests if r.outcome == "ok" and not r.warmup]
        before = [r for r in answered if r.sent_s + r.took_s < 0]
        times = sorted(r.took_s for r in (
            [r for r in answered if r.sent_s < 0 < r.sent_s + r.took_s or 0 <= r.sent_s <= end] if during
            else before or [r for r in answered if r.sent_s > end]))
        if not times:
            return {"p50": None, "p99": None}
        return {"p50": round(statistics.median(times), 2),
                "p99": round(times[min(len(times) - 1, int(0.99 * len(times)))], 2)}

    def added_p99_s(self) -> float | None:
        """What the fault added to the slowest answers: p99 during it less the baseline's p99 (target: at most the
        predicted recovery and 2 s)."""
        during, baseline = self.latency(True)["p99"], self.latency(False)["p99"]
        return None if during is None or baseline is None else round(max(0.0, during - baseline), 2)

    def target_met(self, predicted_s: float) -> str:
        """"yes" where no request failed and the added p99 is within the predicted recovery and the margin."""
        added = self.added_p99_s()
        if self.failed:
            return "no (failed)"
        if added is None:
            return "no baseline"
        return "yes" if added <= predicted_s + ADDED_P99_MARGIN_S else "no"

    def to_json(self) -> dict:
        return {"fault": self.fault, "clients": self.clients, "requests": len(self.requests),
                "added_p99_s": self.added_p99_s(),
                "failed": [{"sent_s": round(r.sent_s, 1), "outcome": r.outcome, "stream": r.stream, "why": r.why}
                           for r in self.failed],
                "resumed_streams": sum(r.resumed for r in self.requests), "back_s": self.back_s,
                "latency_baseline_s": self.latency(False), "latency_during_s": self.latency(True),
                "each": [[round(r.sent_s, 2), round(r.took_s, 2), r.stream, r.outcome, r.resumed, r.warmup]
                         for r in sorted(self.requests, key=lambda r: r.sent_s)]}  # sent, took, stream, …


def run_fault(c: Cluster, transport, tier: Tier, fault: str, url: str, key: str | None,
              clients: int, limit_s: float, progress: Callable[[str], None] = lambda text: None,
              model: str | None = None, act: Callable[[], None] | None = None,
              stream_tokens: int = 400, settle_s: float | None = None, headers: dict | None = None) -> FaultRun:
    """`clients` clients (every second one streaming a long answer, so that one is in flight at the fault; asking for
    `model`, which a router tier needs) from BEFORE_S before the fault until BEFORE_S after the tier answered a
    request sent after it (at most limit_s); the fault comes once every client had an answer and, unless settle_s is
    given, one round of the steady queue after it (the baseline: requests that waited behind a slot's work as the
    requests in flight at the fault did); the clients' first requests are not in the latencies (sent all at once,
    they queued as the steady load never does). `act` does a
    fault of the caller's own (a bad change applied and rolled back) and returns when it is over; stream_tokens: how
    long each stream is; settle_s: BEFORE_S, or shorter where no baseline is wanted; headers: with every request."""
    run, steady = FaultRun(fault, clients), settle_s is None
    settle_s = BEFORE_S if settle_s is None else settle_s
    pool = Clients(url, key, clients, limit_s + 60, model, stream_tokens, headers)
    started = time.monotonic()
    pool.start()
    pool.warm(limit_s + 60)  # every client's first request was sent at once: the fault comes once all are answered
    # and, for the baseline, once each had one more answer from the steady queue (a round takes as long as the first)
    time.sleep(max(settle_s, time.monotonic() - started) if steady else settle_s)
    progress(f"{fault} …")
    try:
        if fault in QUIET_FAULTS:  # the clients stop, the tier is released, they start again: the fault's time
            pool.quiet()
            release(c, transport, tier, limit_s)
            at = time.monotonic()
            pool.resume()
        elif act:
            at = time.monotonic()
            act()
        elif fault == CONTROL:
            at = time.monotonic()
        else:
            asked = time.monotonic()  # the fault, on this machine's clock: a kill lands while disrupt runs, so
            disrupt(c, transport, tier, fault)  # before it returns; a preemption when it returns (SLURM ended the job)
            at = time.monotonic() if fault == "preempted" else asked
        while time.monotonic() - at < limit_s:
            back = [r.sent_s for r in pool.requests() if r.sent_s > at + 1 and r.outcome == "ok"]
            if back:
                run.back_s = round(min(back) - at, 1)
                break
            time.sleep(0.5)
        progress(f"{fault}: the tier answers again; {settle_s:g} s more")
        time.sleep(settle_s)
    finally:
        run.requests = pool.stop(limit_s + 90)
        if fault == "preempted":  # the node is the tiers' again, also where the tier never came back
            end_preemption(c, transport)
    for r in run.requests:  # times from the fault, unrounded: a request sent 6 ms before it and refused 5 ms later
        r.sent_s -= at        # read as ending before it once rounded to 0.01 s (the report rounds)
    return run


class Clients:
    """`count` clients sending chat completions to `url` until stopped, every second one streaming `stream_tokens`
    tokens (ignoring end of text, so a stream is long), the others 8; each request's outcome, sent at this
    machine's monotonic clock. A failed request: any answer but 200, a stream without its [DONE] or with an error
    event, or no answer."""

    def __init__(self, url: str, key: str | None, count: int, timeout_s: float, model: str | None = None,
                 stream_tokens: int = 400, headers: dict | None = None):
        self.url, self.timeout_s, self.stream_tokens, self.model = url, timeout_s, stream_tokens, model
        self.headers = {**(headers or {}), **({"Authorization": f"Bearer {key}"} if key else {})}
        self._requests: list[Request] = []
        self._lock, self._stop, self._quiet, self._busy = threading.Lock(), threading.Event(), threading.Event(), 0
        self._answered = [False] * count  # each client's first request ended
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(count)]

    def start(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def warm(self, limit_s: float) -> float:
        """Wait until every client's first request ended (at most limit_s); when, on this machine's clock."""
        started = time.monotonic()
        while not all(self._answered) and time.monotonic() - started < limit_s:
            time.sleep(0.1)
        return time.monotonic()

    def quiet(self) -> None:
        """Send nothing new, and return once no request is in flight."""
        self._quiet.set()
        while self._busy:
            time.sleep(0.1)

    def resume(self) -> None:
        self._quiet.clear()

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def stop(self, wait_s: float) -> list[Request]:
        """Stop sending; every request, once those in flight ended (at most wait_s each)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(wait_s)
        return self.requests()

    def _client(self, index: int) -> None:
        stream = index % 2 == 1
        while not self._stop.is_set():
            if self._quiet.is_set():
                time.sleep(0.1)
                continue
            with self._lock:
                self._busy += 1
            started = time.monotonic()
            body = {"messages": [{"role": "user", "content": "Say hi"}],
                    "max_tokens": self.stream_tokens if stream else 8, "stream": stream, "ignore_eos": stream,
                    **({"model": self.model} if self.model else {})}
            try:
                answer = httpx.post(self.url, json=body, headers=self.headers, timeout=self.timeout_s)
                ok = answer.status_code == 200 and (not stream or (answer.text.rstrip().endswith("data: [DONE]")
                                                                    and '"error"' not in answer.text))
                outcome, resumed = ("ok" if ok else str(answer.status_code)), RESUMED in answer.text
                why = "" if ok else answer.text[-160:] if stream else answer.text[:160]
            except httpx.HTTPError as exc:
                outcome, resumed, why = type(exc).__name__, False, str(exc)[:160]
            with self._lock:
                self._requests.append(Request(started, stream, outcome, time.monotonic() - started, resumed, why,
                                              warmup=not self._answered[index]))
                self._busy -= 1
                self._answered[index] = True
            time.sleep(0.2)


@dataclass
class OverloadRun:
    """More requests at once than a tier admits (its slots and queue): how fast the excess was told 429."""

    admitted: int
    outcomes: list[tuple[str, float, str | None]] = field(default_factory=list)  # (status or error, s, Retry-After)
    gateway_s: list[float] = field(default_factory=list)  # each 429's time in nginx, as its header said

    @property
    def refused_ms(self) -> list[float]:
        return sorted(round(took * 1000, 1) for outcome, took, _ in self.outcomes if outcome == "429")

    @property
    def failed(self) -> list[str]:
        """Anything but an answer or a prompt 429 with Retry-After: an admitted request that failed, a timeout."""
        return [f"{outcome} after {took:.1f} s" for outcome, took, after in self.outcomes
                if outcome != "200" and not (outcome == "429" and after)]

    def to_json(self) -> dict:
        ms = self.refused_ms
        return {"admitted": self.admitted, "sent": len(self.outcomes), "refused": len(ms),
                "refused_ms": spread(ms), "gateway_ms": spread(sorted(round(s * 1000, 1) for s in self.gateway_s)),
                "failed": self.failed}


def spread(ms: list[float]) -> dict[str, float | None]:
    """p50, p99 and the slowest of sorted milliseconds."""
    return {"p50": statistics.median(ms) if ms else None,
            "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else None, "max": ms[-1] if ms else None}


def run_overload(url: str, key: str | None, admitted: int, extra: int, model: str | None,
                 timeout_s: float) -> OverloadRun:
    """admitted + extra requests sent at once (a barrier releases them together): each one's status and time."""
    run, lock, gate = OverloadRun(admitted), threading.Lock(), threading.Barrier(admitted + extra)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"messages": [{"role": "user", "content": "Count to fifty."}], "max_tokens": 64,
            **({"model": model} if model else {})}

    def one() -> None:
        with httpx.Client(timeout=timeout_s) as client:  # made before the barrier: its TLS set-up is not timed
            gate.wait()
            started = time.monotonic()
            try:
                answer = client.post(url, json=body, headers=headers)
                outcome = (str(answer.status_code), time.monotonic() - started, answer.headers.get("retry-after"))
                with contextlib.suppress(ValueError), lock:
                    run.gateway_s += [float(answer.headers[GATEWAY_TIME])] if GATEWAY_TIME in answer.headers else []
            except httpx.HTTPError as exc:
                outcome = (type(exc).__name__, time.monotonic() - started, None)
        with lock:
            run.outcomes.append(outcome)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(admitted + extra)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    return run
