"""The faults benchmark: clients send chat completions through the gateway (half of them streaming) while one fault
is done to the tier; every request's outcome and time, the streams the gateway resumed, and the added latency."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from clusterbook.effects.recovery import disrupt, end_preemption, preempting_partition
from clusterbook.model.schema import Cluster, RouterTier, RpcTier

RESUMED = ": clusterbook: the stream resumed"  # the SSE comment the hold service writes where it continued a stream
BEFORE_S = 3  # clients run this long before the fault (the baseline) and after the tier answers again
NEW_JOB_FAULTS = ("job ended", "preempted")  # the tier comes back in a new SLURM job: the new job's hold and prediction


def faults_for(c: Cluster, tier: RouterTier | RpcTier) -> tuple[str, ...]:
    """The faults a tier can be given: its server killed, an RPC worker killed; under SLURM its job ended (as a
    preemption ends a job that is not requeued: the keeper submits a new one), and a single-node tier preempted by a
    job of the partition that preempts it (where clusterbook configures SLURM): it moves to another node, and the
    preemptor is ended once the tier answers again."""
    slurm = tier.manager == "slurm"
    return (("worker killed",) if isinstance(tier, RpcTier) else ()) + ("head killed",) + \
        (("job ended",) if slurm else ()) + \
        (("preempted",) if slurm and isinstance(tier, RouterTier) and preempting_partition(c) else ())


@dataclass
class Request:
    """One client request: when it was sent (seconds from the fault), what came of it, how long it took."""

    sent_s: float
    stream: bool
    outcome: str  # "ok", or the status code or error that the client saw
    took_s: float
    resumed: bool = False


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
        was back) or before it (the baseline)."""
        end = self.back_s if self.back_s is not None else float("inf")
        times = sorted(r.took_s for r in self.requests if r.outcome == "ok" and (
            (r.sent_s < 0 < r.sent_s + r.took_s or 0 <= r.sent_s <= end) if during else r.sent_s + r.took_s < 0))
        if not times:
            return {"p50": None, "p99": None}
        return {"p50": round(statistics.median(times), 2),
                "p99": round(times[min(len(times) - 1, int(0.99 * len(times)))], 2)}

    def to_json(self) -> dict:
        return {"fault": self.fault, "clients": self.clients, "requests": len(self.requests),
                "failed": [{"sent_s": round(r.sent_s, 1), "outcome": r.outcome} for r in self.failed],
                "resumed_streams": sum(r.resumed for r in self.requests), "back_s": self.back_s,
                "latency_before_s": self.latency(False), "latency_during_s": self.latency(True)}


def run_fault(c: Cluster, transport, tier: RouterTier | RpcTier, fault: str, url: str, key: str | None,
              clients: int, limit_s: float, progress: Callable[[str], None] = lambda text: None,
              model: str | None = None) -> FaultRun:
    """`clients` clients (every second one streaming a long answer, so that one is in flight at the fault; asking for
    `model`, which a router tier needs) from
    BEFORE_S before the fault until BEFORE_S after the tier answered a request sent after it (at most limit_s)."""
    run, stop, lock = FaultRun(fault, clients), threading.Event(), threading.Lock()
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def client(stream: bool) -> None:
        while not stop.is_set():
            started = time.monotonic()
            body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 400 if stream else 8,
                    "stream": stream, "ignore_eos": stream, **({"model": model} if model else {})}
            try:
                answer = httpx.post(url, json=body, headers=headers, timeout=limit_s + 60)
                ok = answer.status_code == 200 and (not stream or (answer.text.rstrip().endswith("data: [DONE]")
                                                                    and '"error"' not in answer.text))
                outcome, resumed = ("ok" if ok else str(answer.status_code)), RESUMED in answer.text
            except httpx.HTTPError as exc:
                outcome, resumed = type(exc).__name__, False
            with lock:
                run.requests.append(Request(started, stream, outcome, time.monotonic() - started, resumed))
            time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(i % 2 == 1,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(BEFORE_S)
    progress(f"{fault} …")
    try:
        disrupt(c, transport, tier, fault)
        at = time.monotonic()  # the fault, on this machine's clock
        while time.monotonic() - at < limit_s:
            with lock:
                back = [r.sent_s for r in run.requests if r.sent_s > at + 1 and r.outcome == "ok"]
            if back:
                run.back_s = round(min(back) - at, 1)
                break
            time.sleep(0.5)
        progress(f"{fault}: the tier answers again; {BEFORE_S} s more")
        time.sleep(BEFORE_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(limit_s + 90)
        if fault == "preempted":  # the node is the tiers' again, also where the tier never came back
            end_preemption(c, transport)
    for r in run.requests:  # times from the fault
        r.sent_s = round(r.sent_s - at, 2)
    return run
