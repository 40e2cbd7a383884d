"""Safe change on the lab, timed: apply with nothing changed, a good change (a flag), a bad change (a model file no
node has: rolled back by itself) and the way back, N times; print each phase's seconds and the rollback's time to
an answer, and write them as JSON. Needs the systemd lab deployed (`invoke demo`, or lab.up and the deploys).

    .venv/bin/python benchmarks/apply.py [--runs 3] [--out benchmarks/results/apply.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "lab/cluster.yaml"


def invoke(*args: str, cluster: Path = LAB) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "COLUMNS": "200", "INVOKE_CLUSTERBOOK_CLUSTER": str(cluster)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=1800)
    return proc, time.monotonic() - started


def latest_change() -> dict:
    return json.loads(sorted((ROOT / "runs/changes/lab").glob("*.json"))[-1].read_text())


def files(folder: Path) -> tuple[Path, Path]:
    """The good change (reasoning's ctx_size 2048 -> 1536) and the bad one (its model switched to a missing file)."""
    text = LAB.read_text()
    good = text.replace("    ctx_size: 2048\n", "    ctx_size: 1536\n")
    block = re.search(r"  - id: lab-reasoning\n(?:    .*\n)+", good).group(0)
    bad = (good.replace(block, block + block.replace("lab-reasoning", "lab-reasoning-v2"))
           .replace("    model: lab-reasoning\n", "    model: lab-reasoning-v2\n")
           .replace("default_model: lab-reasoning\n", "default_model: lab-reasoning-v2\n")
           .replace("model: lab-reasoning}", "model: lab-reasoning-v2}"))
    (folder / "good").mkdir()
    (folder / "bad").mkdir()
    (folder / "good/cluster.yaml").write_text(good)
    (folder / "bad/cluster.yaml").write_text(bad)
    return folder / "good/cluster.yaml", folder / "bad/cluster.yaml"


def one_run(index: int, good: Path, bad: Path) -> dict:
    nothing, nothing_s = invoke("apply")
    landed, landed_s = invoke("apply", cluster=good)
    rolled, rolled_s = invoke("apply", cluster=bad)
    change = latest_change()
    rollback = change["phases"][-1].get("rollback") or {}
    back, back_s = invoke("apply")
    return {"run": index, "nothing_s": round(nothing_s, 2), "nothing_ok": "Nothing to apply" in nothing.stdout,
            "good_s": round(landed_s, 2), "good_exit": landed.returncode,
            "bad_s": round(rolled_s, 2), "bad_exit": rolled.returncode, "bad_outcome": change["outcome"],
            "rollback_answer_s": round(rollback.get("seconds", float("nan")), 2),
            "back_s": round(back_s, 2), "back_exit": back.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/apply.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = files(Path(tmp))
        runs = []
        for i in range(1, args.runs + 1):
            runs.append(one_run(i, good, bad))
            r = runs[-1]
            print(f"run {i}: nothing {r['nothing_s']} s ({'ok' if r['nothing_ok'] else 'DEPLOYED'}); good "
                  f"{r['good_s']} s (exit {r['good_exit']}); bad {r['bad_s']} s ({r['bad_outcome']}, the tier "
                  f"answered {r['rollback_answer_s']} s after the rollback began); back {r['back_s']} s", flush=True)
    print("\nmedian over", len(runs), "runs:")
    for key, label in (("nothing_s", "apply, nothing changed"), ("good_s", "apply, a flag changed (lands)"),
                       ("bad_s", "apply, a missing model (rolled back)"),
                       ("rollback_answer_s", "rollback began -> the tier answers")):
        values = [r[key] for r in runs]
        print(f"  {label:<42} {statistics.median(values):6.2f} s  (min {min(values):.2f}, max {max(values):.2f})")
    ok = all(r["nothing_ok"] and r["good_exit"] == 0 and r["bad_exit"] == 1 and r["bad_outcome"] == "rolled back"
             and r["back_exit"] == 0 for r in runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
