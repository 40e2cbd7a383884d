"""The lab's llama.cpp build from a cold tree: one source file at a time, CMake's unity build, and the unity build
with only ggml at -O3 (issue 69); then llama-server's decode speed from the last two trees on the lab's models.

Each variant unpacks the cached sdist, applies the lab file's patch series and builds the lab's targets with its
CMake options and 2 jobs, in a folder of its own (nothing cached is touched), one after the other; prints the
seconds, the CPU-seconds and their ratios, then each tree's llama-server answering the same greedy requests (one
thread, 64 tokens each) on the lab's generated models, the trees taking turns for 5 rounds: the median over the rounds
of each round's median decode speed, and the rounds' range (a shared machine's speed drifts by a fifth from minute to
minute). About 14 minutes on a 2-core machine: run it with nothing else busy.

    .venv/bin/python benchmarks/lab_build.py [--cluster lab/cluster.yaml] [--jobs 2] [--skip-plain]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from clusterbook.effects.lab.lab import LAB_MODELS
from clusterbook.effects.lab.llama_build import build_job, run_job
from clusterbook.effects.lab.models import write_model
from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import KERNELS_ONLY_O3

UNITY = "-DCMAKE_UNITY_BUILD=ON"
REQUESTS, TOKENS, ROUNDS = 20, 64, 5


def timed(job, root: Path, options: list[str], jobs: int) -> tuple[float, float, Path]:
    """Wall seconds, CPU-seconds (the compilers') and the bin folder of one build from a cold tree."""
    plan = dataclasses.replace(job.plan, root=str(root), options=options)
    started, before = time.monotonic(), os.times()
    built = run_job(dataclasses.replace(job, plan=plan), jobs)
    after = os.times()
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    return time.monotonic() - started, cpu, built.bin_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def decode_speed(bin_dir: Path, model: Path) -> float:
    """The median tokens per second llama-server reports over the requests, one thread, greedy."""
    port = free_port()
    server = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port",
                               str(port), "-t", "1", "-c", "2048", "-np", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(600):
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            speeds = [client.post("/completion", json={
                "prompt": f"Hello there, this is a prompt of some length {i}", "n_predict": TOKENS,
                "temperature": 0, "ignore_eos": True, "cache_prompt": False}).json()["timings"]["predicted_per_second"]
                for i in range(REQUESTS)]
    finally:
        server.terminate()
        server.wait()
    return statistics.median(speeds)


def compare_decode(trees: dict[str, Path], models: dict[str, Path], rounds: int = ROUNDS) -> dict:
    """(tree, model) -> (median, slowest, fastest) of the rounds' medians, the trees taking turns in each round."""
    seen: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, bin_dir in trees.items():
            for model, path in models.items():
                seen.setdefault((name, model), []).append(decode_speed(bin_dir, path))
    return {key: (statistics.median(v), min(v), max(v)) for key, v in seen.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="lab/cluster.yaml")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-plain", action="store_true", help="leave out the one-file-at-a-time build (5 minutes)")
    args = ap.parse_args()
    job = build_job(load_cluster(args.cluster))
    plain = [o for o in job.plan.options if o != UNITY and o not in KERNELS_ONLY_O3]
    variants = {"one file at a time, all -O3": plain, "unity build, all -O3": [*plain, UNITY],
                "unity build, ggml -O3, the rest -O1": [*plain, UNITY, *KERNELS_ONLY_O3]}
    if args.skip_plain:
        del variants["one file at a time, all -O3"]
    with tempfile.TemporaryDirectory(prefix="clusterbook-lab-build-") as scratch:
        results = {name: timed(job, Path(scratch) / str(i), options, args.jobs)
                   for i, (name, options) in enumerate(variants.items())}
        models = {name: write_model(LAB_MODELS[name], Path(scratch) / f"{name}.gguf")
                  for name in ("lab-reasoning", "lab-fast-a")}
        speeds = compare_decode({name: results[name][2] for name in list(variants)[-2:]}, models)
    first_wall, first_cpu, _ = next(iter(results.values()))
    print(f"targets {', '.join(job.plan.targets)}, {args.jobs} jobs, unpack + patch + configure + build:")
    for name, (wall, cpu, _) in results.items():
        print(f"  {name:38} {wall:5.0f} s ({wall / first_wall:.2f})  {cpu:5.0f} CPU-s ({cpu / first_cpu:.2f})")
    print(f"llama-server decode, {REQUESTS} requests of {TOKENS} tokens a round, one thread, {ROUNDS} rounds "
          "(tokens/s: median, range):")
    for (name, model), (median, low, high) in sorted(speeds.items(), key=lambda kv: kv[0][1]):
        print(f"  {name:38} {model:14} {median:7.0f}  {low:5.0f}-{high:.0f}")


if __name__ == "__main__":
    main()
