"""Where does the RPC tier lose decode speed behind llama-server? One server flag or setting changed at a time.

Usage (device machine, after build.sh): python3 benchmarks/device/server_path.py CLUSTER_FILE OUT_DIR [LOG_DIR]
The head's command line is the rendered one (clusterbook.flags); each variant adds, replaces or sets one thing.
Decode tok/s is llama-server's own figure (timings.predicted_per_second), median of repeated plain requests.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from clusterbook import flags as fl
from clusterbook.benchmark import PROMPTS
from clusterbook.effects.probes import chat
from clusterbook.loader import load_cluster
from clusterbook.render.artifacts import server_exec


def replace(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


# name -> (change to the head's argv, extra environment of the head)
VARIANTS = {
    "rendered": (lambda a: a, {}),
    "backend sampling (-bs)": (lambda a: [*a, "--backend-sampling"], {}),
    "threads 1": (lambda a: replace(a, "--threads", "1"), {}),
    "poll 0": (lambda a: [*a, "--poll", "0"], {}),
    "no pipeline copies (-ot none)": (lambda a: [*a, "-ot", "nomatch_xyz=CPU"], {}),
    "graph reuse off (diagnostic)": (lambda a: a, {"LLAMA_GRAPH_REUSE_DISABLE": "1"}),
    "CUDA graph opt": (lambda a: a, {"GGML_CUDA_GRAPH_OPT": "1"}),
    "split 1,3 (more on the head's GPU)": (lambda a: replace(a, "--tensor-split", "1,3"), {}),
    "split 3,1 (more on the worker)": (lambda a: replace(a, "--tensor-split", "3,1"), {}),
}


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("server did not become healthy")


def measure(url: str) -> dict:
    chat(url, "m", max_tokens=8)
    result = {}
    for name in ("short", "code"):
        runs = [chat(url, "m", max_tokens=128, prompt=PROMPTS[name])["timings"]["predicted_per_second"]
                for _ in range(3)]
        result[name] = [round(r, 1) for r in runs]
    everything = [r for runs in result.values() for r in runs]
    result["median"] = round(statistics.median(everything), 1)
    return result


def run_head(argv: list[str], env: dict, url: str, log: Path) -> dict:
    full_env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(argv[0]), "CUDA_VISIBLE_DEVICES": "0", **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full_env)
        try:
            started = time.monotonic()
            wait_healthy(url, proc)
            loaded = time.monotonic() - started
            result = measure(url)
            result["load_s"] = round(loaded, 1)
            return result
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    c = load_cluster(sys.argv[1])
    out = Path(sys.argv[2])
    logs = Path(sys.argv[3]) if len(sys.argv) > 3 else out
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    tier = c.tier("reasoning")
    url = f"http://127.0.0.1:{tier.port}"
    head = [a for a in server_exec(c, tier) if not a.startswith(("/usr/bin/numactl", "--cpunodebind", "--membind"))]
    results = {}
    # one GPU, no RPC: the same head line without --rpc/--split/--tensor-split
    one = list(head)
    for flag in ("--rpc", "--tensor-split"):
        i = one.index(flag)
        del one[i:i + 2]
    for name, argv in {"one GPU, rendered flags": one, "one GPU, -bs": [*one, "--backend-sampling"]}.items():
        results[name] = run_head(argv, {}, url, logs / f"{name.split(',')[0].replace(' ', '-')}.log")
        print(f"{name:<40} {results[name]}", flush=True)
    worker_env = {**os.environ, "LD_LIBRARY_PATH": c.engine.install_dir, "CUDA_VISIBLE_DEVICES": "1"}
    worker_argv = [*fl.worker_argv(c, tier, tier.workers[0]), "-c"]
    with (logs / "worker.log").open("wb") as wlog:
        worker = subprocess.Popen(worker_argv, stdout=wlog, stderr=subprocess.STDOUT, env=worker_env)
        time.sleep(3)
        try:
            for name, (change, env) in VARIANTS.items():
                try:
                    results[name] = run_head(change(head), env, url, logs / f"head-{len(results)}.log")
                except Exception as e:  # keep going: one broken variant must not lose the others
                    results[name] = {"error": str(e)}
                print(f"{name:<40} {results[name]}", flush=True)
                (out / "server-path.json").write_text(json.dumps(results, indent=2))
                time.sleep(1)
        finally:
            worker.terminate()
            worker.wait(timeout=30)


if __name__ == "__main__":
    main()
