"""How fast hostile and large cluster files are refused or accepted: an alias bomb, 5,000 levels of nesting,
10 MB files (valid and invalid), and the real cluster file. Prints seconds per case (median of 3).

    .venv/bin/python benchmarks/loading.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.commands.cluster import checked_cluster  # noqa: E402
from clusterbook.model.problems import InputError  # noqa: E402


def alias_bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):  # 10^9 values once expanded
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 10)}]")
    return "\n".join(lines) + "\n"


def large(valid: bool) -> str:
    """cluster.yaml with about 10 MB of decisions (valid) or of tags on one model (refused: too many tags)."""
    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    if valid:
        base = data["decisions"][0]
        data["decisions"] += [{**base, "id": f"X{i}", "claims": []} for i in range(16_000)]
    else:
        data["models"][0]["tags"] = [f"tag-{i}" for i in range(650_000)]
    return yaml.safe_dump(data, sort_keys=False)


def measure(text: str) -> tuple[float, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    times, outcome = [], ""
    for _ in range(3):
        started = time.perf_counter()
        try:
            checked_cluster(f.name)
            outcome = "accepted"
        except InputError as exc:
            outcome = f"refused: {str(exc.problems[0])[len(f.name) + 1:][:70]}"
        times.append(time.perf_counter() - started)
    Path(f.name).unlink()
    return statistics.median(times), outcome


def main() -> None:
    cases = {
        "cluster.yaml (beefcake2)": (ROOT / "cluster.yaml").read_text(),
        "alias bomb (10^9 values)": alias_bomb(),
        "5,000 levels of nesting": "cluster: " + "[" * 5000 + "]" * 5000 + "\n",
        "10 MB, valid (16,000 decisions)": large(True),
        "10 MB, invalid (650,000 tags)": large(False),
    }
    print(f"{'case':34} {'size':>9} {'seconds':>8}  outcome")
    for name, text in cases.items():
        seconds, outcome = measure(text)
        print(f"{name:34} {len(text.encode()) / 1e6:7.2f}MB {seconds:8.3f}  {outcome}")


if __name__ == "__main__":
    main()
