"""Soak the main job: from a fresh lab (`lab.down`, then `invoke demo`) N times in a row; print each run's result,
duration and resilience figures (power-off, boot, recovery), and write them as JSON.

    .venv/bin/python benchmarks/soak.py [--runs 3] [--out benchmarks/results/soak.json] [--apart DIR]

With --apart DIR each run has a lab of its own beside the lab the tests use, and the runs go at once (CI: beside
the tests; issue 69: one after another they were the suite's longest wait): lab/cluster.yaml with only its names and
addresses changed (run 1: cluster `soak`, nodes soak1-3, 10.216.0.0/23; run 2: `soakb`, 10.218; run 3: `soakc`,
10.219), each from DIR/run-N, a folder that links to every entry of the checkout but its outputs (runs/, reports/,
site/, .clusterbook/), which the run writes there.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESILIENCE = "Resilience"


OUTPUTS = {"runs", "reports", "site", ".clusterbook", ".git", "__pycache__"}  # what a run writes; kept apart
LABS = (("soak", 216), ("soakb", 218), ("soakc", 219))  # each run's lab with --apart: its name, its subnets' octet


def apart_names(name: str, octet: int) -> dict[str, str]:
    """lab/cluster.yaml's names and addresses, and no other text, as a soak lab's."""
    return {r"\blab([123])\b": rf"{name}\1", r"\b10\.213\.": f"10.{octet}.", r"(?m)^  name: lab$": f"  name: {name}",
            r"\.clusterbook/lab/": f".clusterbook/{name}/"}


def apart(folder: Path, name: str, octet: int) -> Path:
    """A folder that reads as the checkout (a link to each of its entries) and writes its own outputs, holding the
    lab's file with a soak lab's names and addresses: its path."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name not in OUTPUTS and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    (folder / "lab").unlink()
    (folder / "lab").mkdir()
    for entry in (ROOT / "lab").iterdir():
        (folder / "lab" / entry.name).symlink_to(entry)
    text = (ROOT / "lab/cluster.yaml").read_text()
    for pattern, new in apart_names(name, octet).items():
        text, count = re.subn(pattern, new, text)
        assert count, f"lab/cluster.yaml no longer has {pattern}: update benchmarks/soak.py's apart_names"
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
    if args.apart and args.runs > len(LABS):
        parser.error(f"--apart runs at most {len(LABS)} runs (one lab each)")
    wheres = ([apart(Path(args.apart) / f"run-{i}", *LABS[i - 1]) for i in range(1, args.runs + 1)] if args.apart
              else [ROOT] * args.runs)

    def reported(i: int) -> dict:
        run = one_run(i, wheres[i - 1])
        figures = ", ".join(f"{k} {v}" for k, v in run["resilience"].items())
        print(f"run {i}: demo exit {run['demo_exit']} in {run['demo_s']:.0f} s; {figures}", flush=True)
        if run["tail"]:
            print(run["tail"], flush=True)
        if args.apart:  # the run's lab goes with it; the tests' lab is theirs
            invoke(wheres[i - 1], "lab.down", "--cluster", "lab/cluster.yaml")
        return run

    if args.apart:  # each on a lab of its own: all at once
        with ThreadPoolExecutor(args.runs) as pool:
            runs = list(pool.map(reported, range(1, args.runs + 1)))
    else:
        runs = [reported(i) for i in range(1, args.runs + 1)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    labs = ", ".join(name for name, _ in LABS[:args.runs])
    Path(args.out).write_text(json.dumps({"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                                          "lab": f"a lab each, at once ({labs})" if args.apart else "lab/cluster.yaml",
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                          "runs": runs}, indent=2) + "\n")
    passed = sum(r["demo_exit"] == 0 and r["lab_down_ok"] for r in runs)
    print(f"{passed} of {len(runs)} runs passed from a fresh lab; figures in {args.out}")
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
