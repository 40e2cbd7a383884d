"""The lab's llama.cpp build from a cold tree, one source file at a time against CMake's unity build (issue 69).

Each variant unpacks the cached sdist, applies the lab file's patch series and builds the lab's targets with its
CMake options and 2 jobs, in a folder of its own (nothing cached is touched), one after the other; prints the
seconds and their ratio. About 10 minutes on a 2-core machine: run it with nothing else busy.

    .venv/bin/python benchmarks/lab_build.py [--cluster lab/cluster.yaml] [--jobs 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from clusterbook.effects.lab.llama_build import build_job, run_job
from clusterbook.model.loader import load_cluster

UNITY = "-DCMAKE_UNITY_BUILD=ON"


def timed(job, root: Path, options: list[str], jobs: int) -> float:
    plan = dataclasses.replace(job.plan, root=str(root), options=options)
    started = time.monotonic()
    run_job(dataclasses.replace(job, plan=plan), jobs)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="lab/cluster.yaml")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    job = build_job(load_cluster(args.cluster))
    plain = [o for o in job.plan.options if o != UNITY]
    with tempfile.TemporaryDirectory(prefix="clusterbook-lab-build-") as scratch:
        one_at_a_time = timed(job, Path(scratch) / "plain", plain, args.jobs)
        unity = timed(job, Path(scratch) / "unity", [*plain, UNITY], args.jobs)
    print(f"targets {', '.join(job.plan.targets)}, {args.jobs} jobs, unpack + patch + configure + build:")
    print(f"  one file at a time  {one_at_a_time:6.0f} s")
    print(f"  unity build         {unity:6.0f} s   ({unity / one_at_a_time:.2f} of it)")


if __name__ == "__main__":
    main()
