"""A day of requests, compressed, against a tier on demand in the SLURM lab (issue 33): bursty working hours, a quiet
evening and night. Prints the time the tier held its nodes against always-on, the share of its idle time it gave
back, and every request's outcome; writes them as JSON. Target: >= 80 % of the idle time returned, 0 failed requests.

Run as root from the project root with the SLURM lab up (`invoke lab.up --slurm --cluster lab/cluster-slurm.yaml`
and its tiers deployed):
    .venv/bin/python benchmarks/on_demand_day.py [--hour-s 20] [--idle-s 5] [--out FILE]
It deploys the lab's reasoning tier on demand from a copy of lab/cluster-slurm.yaml, replays the day, and deploys the
file's own reasoning tier again at the end. With --hour-s 20 and --idle-s 5 a day takes 8 minutes and the idle time
is a quarter of an hour (15 minutes of a real day).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.effects.ssh import SshTransport  # noqa: E402
from clusterbook.model.loader import load_cluster  # noqa: E402
from clusterbook.pure.planner.capacity import plan_tier  # noqa: E402
from clusterbook.pure.planner.loadtime import cold_start_s, wait_cap_s  # noqa: E402

SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"
TIER = "reasoning"
LINE = "    slurm: {partition: ai, mem: 1G, grace_seconds: 10, requeue: false, gres: null, keeper_interval_s: 3}\n"


def day(seed: int = 33) -> list[tuple[float, int]]:
    """(hour of the day, requests at once): bursts of 1-4 requests, two or three an hour from 9 to 17 but none at
    lunch (12), one every other hour until 21, nothing at night."""
    rng = random.Random(seed)
    out = []
    for hour in range(24):
        if 9 <= hour < 17 and hour != 12:
            out += [(hour + rng.random(), rng.randint(1, 4)) for _ in range(rng.randint(2, 3))]
        elif 17 <= hour < 21 and hour % 2:
            out.append((hour + rng.random(), 1))
    return sorted(out)


def invoke(cluster: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args, "--cluster", str(cluster)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=900)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hour-s", type=float, default=20, help="seconds one hour of the day takes (default 20)")
    parser.add_argument("--idle-s", type=int, default=5, help="the tier's on_demand idle_s (default 5)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/on-demand-day.json"))
    args = parser.parse_args()

    head, tail = SLURM_LAB.read_text().rsplit(LINE, 1)
    folder = Path(tempfile.mkdtemp(prefix="on-demand-day."))
    demand = folder / SLURM_LAB.name
    demand.write_text(head + LINE + f"    on_demand: {{idle_s: {args.idle_s}}}\n" + tail)
    c = load_cluster(demand)
    tier = c.tier(TIER)
    plan = plan_tier(c, tier)
    cap = wait_cap_s(c, tier, plan)
    deployed = invoke(demand, "deploy.gateway", "deploy.reasoning")
    if deployed.returncode != 0:
        print(deployed.stdout[-3000:] + deployed.stderr, file=sys.stderr)
        return 1
    route = next(r for r in c.gateway.routes if r.tier == TIER)
    url = f"http://{c.gateway.listen[0]}:{route.port}/v1/chat/completions"
    transport = SshTransport(c)
    job = f"llama-{TIER}"

    held: list[float] = []  # seconds of each 1 s sample in which the job ran
    busy: list[tuple[float, float]] = []  # (start, end) of each request, seconds into the day
    outcomes: list[dict] = []
    start = time.monotonic()
    length = 24 * args.hour_s
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            out = transport.run(c.keeper_node, f"squeue -h -n {job} -t RUNNING -o %i", timeout=10)
            held.append(1.0 if out.stdout.strip() else 0.0)
            done.wait(1.0)

    def request(at: float) -> None:
        t0 = time.monotonic()
        try:
            response = httpx.post(url, timeout=cap + 30, json={
                "model": tier.served_models[0], "max_tokens": 8,
                "messages": [{"role": "user", "content": "Say OK."}]})
            status = response.status_code
        except httpx.HTTPError as exc:
            status = f"error: {exc}"
        t1 = time.monotonic()
        busy.append((t0 - start, t1 - start))
        outcomes.append({"hour": round(at, 2), "status": status, "seconds": round(t1 - t0, 2)})

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(max_workers=16) as pool:
        for hour, count in day():
            delay = start + hour * args.hour_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            print(f"{hour:5.2f} h: {count} request(s)", flush=True)
            for _ in range(count):
                pool.submit(request, hour)
        remaining = start + length - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
    done.set()
    sampler.join()

    held_s = sum(held) * length / max(1, len(held))
    merged: list[list[float]] = []
    for s, e in sorted(busy):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    busy_s = sum(e - s for s, e in merged)
    idle_s = length - busy_s  # always-on holds the nodes all day; idle is the time with no request in flight
    returned = (length - held_s) / idle_s if idle_s else 0.0
    failed = [o for o in outcomes if o["status"] != 200]
    cold = [o["seconds"] for o in outcomes if o["seconds"] > 1.0]
    result = {
        "machine": f"{platform.node()} ({os.cpu_count()} cores), SLURM lab",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "hour_s": args.hour_s, "idle_s": args.idle_s, "cap_s": cap,
        "predicted_cold_start_s": round(cold_start_s(c, tier, plan), 1),
        "day_s": length, "held_s": round(held_s, 1), "busy_s": round(busy_s, 1),
        "idle_returned_pct": round(100 * returned, 1), "requests": len(outcomes), "failed": len(failed),
        "waited_over_1s": len(cold), "outcomes": sorted(outcomes, key=lambda o: o["hour"]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"day of {length:.0f} s (1 h = {args.hour_s:g} s, idle_s {args.idle_s}): the tier held its nodes "
          f"{held_s:.0f} s against {length:.0f} s always-on; requests in flight {busy_s:.0f} s; "
          f"{100 * returned:.1f} % of the idle time given back (target 80 %)")
    print(f"{len(outcomes)} requests, {len(failed)} failed; {len(cold)} waited for a cold start "
          f"({', '.join(f'{s:.1f}' for s in cold)} s; predicted {cold_start_s(c, tier, plan):.1f} s)")
    back = invoke(SLURM_LAB, "deploy.gateway", "deploy.reasoning")
    if back.returncode != 0:
        print("could not deploy lab/cluster-slurm.yaml's reasoning tier again:\n" + back.stderr[-2000:],
              file=sys.stderr)
    return 0 if not failed and returned >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
