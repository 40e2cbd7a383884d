"""A VASP-like day on the SLURM lab (issue 64): while clients use both tiers through the gateway, jobs of the
higher-priority partition `vasp` start and end every few minutes, some taking whole nodes (as a VASP run takes a
node's GPU: they preempt the tiers there), some a single core (CPU-only VASP work); now and then a deploy of both
tiers runs while they hold the nodes. Targets: 0 critical alerts raised by VASP's use; 0 deploys that fail (a tier
behind VASP ends `waiting`, exit status 3); CPU-only VASP jobs never wait on the tiers; every tier back within its
planned new-job recovery after each whole-node job ends; 0 failed client requests (each answered, held, or told 503
with Retry-After).

Run as root from the project root with the SLURM lab up and its tiers deployed (`invoke lab.up --slurm --cluster
lab/cluster-slurm.yaml`, then the deploys): .venv/bin/python benchmarks/vasp_day.py [--minutes 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.effects.ssh import SshTransport  # noqa: E402
from clusterbook.model.loader import load_cluster  # noqa: E402
from clusterbook.pure.planner.capacity import plan_tier  # noqa: E402
from clusterbook.pure.planner.loadtime import predict_load  # noqa: E402

SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"
CTL = "slab1"
USER = "vasp"  # the VASP-like jobs' user: another user than the tiers'
JOBS = "/usr/local/sbin/clusterbook-jobs"


class Day:
    """The replay's state and its measurements."""

    def __init__(self, c, ssh, seconds: float, seed: int):
        self.c, self.ssh, self.end = c, ssh, time.monotonic() + seconds
        self.rng = random.Random(seed)
        self.requests = {"answered": 0, "told to retry": 0, "failed": []}
        self.critical: set[str] = set()
        self.vasp_jobs: list[dict] = []
        self.cpu_waits: list[float] = []
        self.returns: list[dict] = []
        self.deploys: list[dict] = []
        self.lock = threading.Lock()

    def sh(self, command: str, timeout: float = 60):
        return self.ssh.run(CTL, command, timeout=timeout)

    def submit(self, args: str) -> str:
        out = self.sh(f"su {USER} -c 'cd /tmp && sbatch --parsable -p vasp {args}'")
        if not out.ok or not out.stdout.strip().isdigit():
            raise RuntimeError(f"sbatch {args}: {out.tail()}")
        return out.stdout.strip()

    def tiers_serving(self) -> bool:
        return self.sh("test -e /cluster/shared/ai/endpoints/fast.json && "
                       "test -e /cluster/shared/ai/endpoints/reasoning.json").ok

    def vasp(self) -> None:
        """Whole-node jobs of 60-150 s on 1-3 nodes, a CPU-only job of one core between them, a deploy now and then."""
        nodes = [n.name for n in self.c.nodes]
        limit = max(predict_load(self.c, t, plan_tier(self.c, t)).new_job_recovery_s or 0 for t in self.c.tiers)
        while time.monotonic() < self.end - 200:
            time.sleep(self.rng.uniform(20, 60))
            cpu_node = self.rng.choice(nodes)
            cpu_job, asked = self.submit(f"-J vasp-cpu -n1 --cpus-per-task=1 --nodelist={cpu_node} "
                                         "--wrap 'sleep 20'"), time.monotonic()
            while self.sh(f"squeue -h -j {cpu_job} -t PENDING -o %i").stdout.strip():
                time.sleep(0.5)
            self.cpu_waits.append(round(time.monotonic() - asked, 1))
            taken = sorted(self.rng.sample(nodes, self.rng.randint(1, len(nodes))))
            hold = self.rng.uniform(60, 150)
            job = self.submit(f"-J vasp-relax -N{len(taken)} --exclusive --nodelist={','.join(taken)} "
                              f"--wrap 'sleep {hold:.0f}'")
            self.vasp_jobs.append({"job": job, "nodes": taken, "seconds": round(hold)})
            if self.rng.random() < 0.5:  # once a tier it took is pending behind it, deploy both as an operator might
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not any(
                        self.sh(f"{JOBS} squeue {t.name} -t PENDING").stdout.strip() for t in self.c.tiers):
                    time.sleep(1)
                started = time.monotonic()
                run = subprocess.run([sys.executable, "-m", "invoke", "deploy.fast", "deploy.reasoning", "--cluster",
                                      str(SLURM_LAB)], cwd=ROOT, capture_output=True, text=True, timeout=600)
                self.deploys.append({"exit": run.returncode, "seconds": round(time.monotonic() - started, 1),
                                     "while": job})
            while self.sh(f"squeue -h -j {job} -o %i").stdout.strip():
                time.sleep(1)
            ended = time.monotonic()
            while not self.tiers_serving() and time.monotonic() - ended < 10 * limit + 60:
                time.sleep(1)
            self.returns.append({"job": job, "back_s": round(time.monotonic() - ended, 1), "planned_s": limit})

    def client(self, tier: str, url: str, model: str) -> None:
        """One client of a tier through the gateway: a short completion after another; Retry-After is honoured."""
        with httpx.Client(timeout=120) as http:
            while time.monotonic() < self.end:
                try:
                    r = http.post(url, json={"model": model, "max_tokens": 8,
                                             "messages": [{"role": "user", "content": "Say OK."}]})
                    if r.status_code == 200:
                        with self.lock:
                            self.requests["answered"] += 1
                        time.sleep(1)
                        continue
                    if r.status_code == 503 and r.headers.get("Retry-After", "").isdigit():
                        with self.lock:
                            self.requests["told to retry"] += 1
                        time.sleep(min(int(r.headers["Retry-After"]), 10))
                        continue
                    why = f"{tier}: {r.status_code} {r.text[:120]}"
                except httpx.HTTPError as exc:
                    why = f"{tier}: {type(exc).__name__}: {exc}"
                with self.lock:
                    self.requests["failed"].append(why)
                time.sleep(1)

    def alerts(self) -> None:
        query = "curl -sfG localhost:9090/api/v1/query --data-urlencode 'query=ALERTS{alertstate=\"firing\"," \
                "severity=\"critical\"}' | jq -r '.data.result[].metric.alertname'"
        while time.monotonic() < self.end:
            self.critical |= set(self.sh(query).stdout.split())
            time.sleep(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--seed", type=int, default=64)
    parser.add_argument("--out", default=str(ROOT / "reports/vasp-day.json"))
    args = parser.parse_args()
    c = load_cluster(SLURM_LAB)
    ssh = SshTransport(c, ROOT)
    ssh.run(CTL, f"id {USER} >/dev/null 2>&1 || useradd -M -s /bin/bash {USER}")
    day = Day(c, ssh, args.minutes * 60, args.seed)
    gw = c.gateway.listen[0]
    routes = {r.tier: r.port for r in c.gateway.routes}
    threads = [threading.Thread(target=day.client, args=(t.name, f"http://{gw}:{routes[t.name]}/v1/chat/completions",
                                                         t.served_models[0]), daemon=True) for t in c.tiers]
    threads += [threading.Thread(target=day.alerts, daemon=True), threading.Thread(target=day.vasp, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0, day.end - time.monotonic()) + 700)
    report = {"minutes": args.minutes, "vasp_jobs": day.vasp_jobs, "cpu_only_waits_s": day.cpu_waits,
              "tiers_back": day.returns, "deploys": day.deploys, "critical_alerts": sorted(day.critical),
              "requests": {**day.requests, "failed": len(day.requests["failed"]),
                           "failures": day.requests["failed"][:20]}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    late = [r for r in day.returns if r["back_s"] > r["planned_s"]]
    planned = day.returns[0]["planned_s"] if day.returns else "-"
    failed_deploys = [d for d in day.deploys if d["exit"] not in (0, 3)]
    print(f"{len(day.vasp_jobs)} whole-node VASP-like jobs, {len(day.cpu_waits)} CPU-only ones "
          f"(longest wait {max(day.cpu_waits, default=0)} s); tiers back after each in "
          f"{[r['back_s'] for r in day.returns]} s (planned at most {planned} s); deploys' exit "
          f"{[d['exit'] for d in day.deploys]}; critical alerts {sorted(day.critical) or 'none'}; "
          f"requests {day.requests['answered']} answered, {day.requests['told to retry']} told to retry, "
          f"{len(day.requests['failed'])} failed")
    return 0 if not (late or failed_deploys or day.critical or day.requests["failed"]) else 1


if __name__ == "__main__":
    sys.exit(main())
