"""Soak the main job: from a fresh lab (`lab.down`, then `invoke demo`) N times in a row; print each run's result,
duration and resilience figures (power-off, boot, recovery), and write them as JSON.

    .venv/bin/python benchmarks/soak.py [--runs 3] [--out benchmarks/results/soak.json] [--apart DIR]

With --apart DIR it runs on a lab of its own beside the lab the tests use (CI: both at once): lab/cluster.yaml with
only its names and addresses changed (cluster `soak`, nodes soak1-3, 10.216.0.0/23), from DIR, a folder that links
to every entry of the checkout but its outputs (runs/, reports/, site/, .clusterbook/), which the runs write there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESILIENCE = "Resilience"


OUTPUTS = {"runs", "reports", "site", ".clusterbook", ".git", "__pycache__"}  # what a run writes; kept apart
APART = {r"\blab([123])\b": r"soak\1", r"\b10\.213\.": "10.216.", r"(?m)^  name: lab$": "  name: soak",
         r"\.clusterbook/lab/": ".clusterbook/soak/"}  # lab/cluster.yaml's names and addresses, and no other text


def apart(folder: Path) -> Path:
    """A folder that reads as the checkout (a link to each of its entries) and writes its own outputs, holding the
    lab's file with the soak's names and addresses: its path."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name not in OUTPUTS and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    (folder / "lab").unlink()
    (folder / "lab").mkdir()
    for entry in (ROOT / "lab").iterdir():
        (folder / "lab" / entry.name).symlink_to(entry)
    text = (ROOT / "lab/cluster.yaml").read_text()
    for pattern, new in APART.items():
        text, count = re.subn(pattern, new, text)
        assert count, f"lab/cluster.yaml no longer has {pattern}: update benchmarks/soak.py's APART"
    (folder / "lab/cluster.yaml").unlink()
    (folder / "lab/cluster.yaml").write_text(text)
    return folder


def invoke(where: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=where, capture_output=True, text=True,
                          env=env, timeout=3600)


def one_run(index: int, where: Path) -> dict:
    down = invoke(where, "lab.down", "--cluster", "lab/cluster.yaml")
    started = time.monotonic()
    demo = invoke(where, "demo", "--cluster", "lab/cluster.yaml")
    seconds = time.monotonic() - started
    figures: dict[str, float] = {}
    summary = where / "reports/verify-summary.json"
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
    parser.add_argument("--apart", help="run from this folder, on a lab of its own (see above)")
    args = parser.parse_args()
    where = apart(Path(args.apart)) if args.apart else ROOT
    runs = []
    for i in range(1, args.runs + 1):
        run = one_run(i, where)
        runs.append(run)
        figures = ", ".join(f"{k} {v}" for k, v in run["resilience"].items())
        print(f"run {i}: demo exit {run['demo_exit']} in {run['demo_s']:.0f} s; {figures}", flush=True)
        if run["tail"]:
            print(run["tail"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.apart:  # the soak's lab goes with it; the tests' lab is theirs
        invoke(where, "lab.down", "--cluster", "lab/cluster.yaml")
    Path(args.out).write_text(json.dumps({"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                                          "lab": "its own (cluster soak)" if args.apart else "lab/cluster.yaml",
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                          "runs": runs}, indent=2) + "\n")
    passed = sum(r["demo_exit"] == 0 and r["lab_down_ok"] for r in runs)
    print(f"{passed} of {len(runs)} runs passed from a fresh lab; figures in {args.out}")
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
