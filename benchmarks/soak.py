"""Soak the main job: from a fresh lab (`lab.down`, then `invoke demo`) N times in a row; print each run's result,
duration and resilience figures (power-off, boot, recovery), and write them as JSON.

    .venv/bin/python benchmarks/soak.py [--runs 3] [--out benchmarks/results/soak.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESILIENCE = "Resilience"


def invoke(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=3600)


def one_run(index: int) -> dict:
    down = invoke("lab.down")
    started = time.monotonic()
    demo = invoke("demo")
    seconds = time.monotonic() - started
    figures: dict[str, float] = {}
    summary = ROOT / "reports/verify-summary.json"
    if summary.exists():
        for entry in json.loads(summary.read_text()):
            if entry.get("feature") == RESILIENCE:
                figures.update(entry.get("measurements", {}))
    return {"run": index, "lab_down_ok": down.returncode == 0, "demo_exit": demo.returncode,
            "demo_s": round(seconds, 1), "resilience": figures,
            "tail": "" if demo.returncode == 0 else (demo.stdout + demo.stderr)[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/soak.json"))
    args = parser.parse_args()
    runs = []
    for i in range(1, args.runs + 1):
        run = one_run(i)
        runs.append(run)
        figures = ", ".join(f"{k} {v}" for k, v in run["resilience"].items())
        print(f"run {i}: demo exit {run['demo_exit']} in {run['demo_s']:.0f} s; {figures}", flush=True)
        if run["tail"]:
            print(run["tail"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                          "runs": runs}, indent=2) + "\n")
    passed = sum(r["demo_exit"] == 0 and r["lab_down_ok"] for r in runs)
    print(f"{passed} of {len(runs)} runs passed from a fresh lab; figures in {args.out}")
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
