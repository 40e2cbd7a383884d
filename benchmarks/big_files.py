"""invoke check on files far larger than a site's (issue 44: 10,000 claims in at most 20 s, 20,000 jump hosts in
at most 5 s), as an operator runs it (a process: its start, about 1 s, is included), on beefcake2's file with one
section grown. Prints seconds per case.

    .venv/bin/python benchmarks/big_files.py
"""

from __future__ import annotations

import copy
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def grown(kind: str) -> dict:
    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    data = copy.deepcopy(data)
    if kind == "10,000 claims":
        data["decisions"][0]["claims"] = [dict(data["decisions"][0]["claims"][0]) for _ in range(10_000)]
    elif kind == "20,000 jump hosts":
        data["access"]["jump_hosts"].update({f"j{i}": {"address": f"10.9.{i // 250}.{i % 250 + 1}",
                                                       **({"via": f"j{i - 1}"} if i else {})} for i in range(20_000)})
    return data


def main() -> None:
    for kind in ("as written", "10,000 claims", "20,000 jump hosts"):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(yaml.safe_dump(grown(kind), sort_keys=False))
            f.flush()
            start = time.perf_counter()
            done = subprocess.run([str(ROOT / ".venv/bin/invoke"), "check", "--cluster", f.name], cwd=ROOT,
                                  capture_output=True, text=True)
            print(f"{kind}: invoke check {time.perf_counter() - start:.1f} s, exit status {done.returncode}, "
                  f"{max(map(len, done.stdout.splitlines() + done.stderr.splitlines() + ['']))} characters in "
                  "its longest line", flush=True)


if __name__ == "__main__":
    main()
