"""The RPC fast-load patches (P1-P3: patches/rpc-hash-only-for-cache.patch, rpc-send-from-caller.patch,
rpc-receive-pinned.patch), measured: seconds from starting llama-server with its weights on one RPC worker to
/health 200, for a build without and a build with the patches, alternated in one run;
and the greedy output of both, which must be the same.

    python benchmarks/rpc_load.py --plain DIR --patched DIR --model FILE [--runs 3] [--worker-env K=V ...]
                                  [--server-arg=--flag ...]

DIR is a build's bin/ (ggml-rpc-server, llama-server and their libraries, which it runs them with: a copied bin/
still names its build's folder in its run path). On this machine both run the CPU backend over loopback;
on the GPU machine (benchmarks/device/) the worker gets its own GPU through --worker-env CUDA_VISIBLE_DEVICES=1.
Prints each run, the medians, their ratio, and whether the outputs match.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from clusterbook.effects.rehearsal import healthy

PROMPT = "Write one sentence about memory bandwidth."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_once(bin_dir: str, model: str, worker_env: dict, server_args: list[str],
              worker_dir: str | None = None) -> tuple[float, str]:
    """Start a worker (from worker_dir, default bin_dir) and a server whose layers all go to it; seconds to /health
    200, and a greedy answer."""
    rpc_port, http_port = free_port(), free_port()
    with tempfile.TemporaryFile() as log:
        worker = subprocess.Popen([f"{worker_dir or bin_dir}/ggml-rpc-server", "-H", "127.0.0.1", "-p", str(rpc_port)],
                                  env={**os.environ, **worker_env, "LD_LIBRARY_PATH": worker_dir or bin_dir},
                                  stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the worker listens
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", rpc_port)) == 0:
                        break
                time.sleep(0.05)
            started = time.monotonic()
            server = subprocess.Popen([f"{bin_dir}/llama-server", "-m", model, "--rpc", f"127.0.0.1:{rpc_port}",
                                       "-ngl", "99", "--device", "RPC0", "-c", "512", "--host", "127.0.0.1",
                                       "--port", str(http_port), *server_args],
                                      env={**os.environ, "LD_LIBRARY_PATH": bin_dir}, stdout=log, stderr=log)
            try:
                while True:
                    if server.poll() is not None or time.monotonic() - started > 900:
                        log.seek(0)
                        sys.exit(f"llama-server exited or took too long:\n{log.read().decode()[-3000:]}")
                    if healthy(f"http://127.0.0.1:{http_port}/health"):
                        break
                    time.sleep(0.05)
                seconds = time.monotonic() - started
                answer = httpx.post(f"http://127.0.0.1:{http_port}/completion", timeout=300, json={
                    "prompt": PROMPT, "n_predict": 24, "temperature": 0, "seed": 1}).json()["content"]
                return seconds, answer
            finally:
                server.terminate()
                server.wait(30)
        finally:
            worker.terminate()
            worker.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", required=True, help="bin/ of the build without the patch")
    parser.add_argument("--patched", required=True, help="bin/ of the build with the patch")
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker-env", action="append", default=[], help="K=V for the worker (e.g. its GPU)")
    parser.add_argument("--server-arg", action="append", default=[], help="an extra llama-server argument")
    args = parser.parse_args()
    worker_env = dict(kv.split("=", 1) for kv in args.worker_env)
    size = os.path.getsize(args.model) / 1e9
    times: dict[str, list[float]] = {"plain": [], "patched": []}
    answers: dict[str, set[str]] = {"plain": set(), "patched": set()}
    print(f"model {args.model} ({size:.2f} GB), all layers on one RPC worker over loopback, {args.runs} runs each")
    for run in range(args.runs):
        for name in ("plain", "patched"):  # alternated, so the page cache and the machine's load treat both alike
            seconds, answer = load_once(getattr(args, name), args.model, worker_env, args.server_arg)
            times[name].append(seconds)
            answers[name].add(answer)
            print(f"  run {run + 1} {name:8} {seconds:7.2f} s to /health 200  ({size / seconds:.2f} GB/s)")
    for head, worker in (("patched", "plain"), ("plain", "patched")):  # the wire format is unchanged: they mix
        seconds, answer = load_once(getattr(args, head), args.model, worker_env, args.server_arg, getattr(args, worker))
        answers[head].add(answer)
        print(f"  {head} head, {worker} worker: {seconds:7.2f} s to /health 200")
    plain, patched = statistics.median(times["plain"]), statistics.median(times["patched"])
    same = len(answers["plain"] | answers["patched"]) == 1
    print(f"median: without the patch {plain:.2f} s, with it {patched:.2f} s: {plain / patched:.2f}x faster")
    print(f"greedy output: {'identical' if same else 'DIFFERENT'} across every run of both builds and the mixes")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
