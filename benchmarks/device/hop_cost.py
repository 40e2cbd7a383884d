"""What one RPC hop costs per token, and what a served split tier reaches against one GPU (issue 48, item 1).

    python3 hop_cost.py --out DIR --variant NAME=BIN_DIR ... --model NAME=FILE[:TOKENS] ...

For each model, in each of --rounds rounds: llama-bench decode (tg) on GPU 0 alone, split 1:1 over GPUs 0 and 1 in
one process (no RPC), and split 1:1 over RPC (a worker on GPU 1, the head on GPU 0) with each variant's build (on a
machine with one GPU, --worker-gpu 0: the worker shares GPU 0, and there is no split in one process); each round's
RPC runs are also compared with that round's split in one process, so a GPU's drift between rounds cancels. Then
llama-server's own decode figure (timings.predicted_per_second, median of plain greedy requests) for one GPU and
for the split with each variant, and the greedy answers' digest; with --serve-with NAME=FLAGS, again with those
llama-server flags for one GPU and the last variant's split (a flag the build refuses is reported, not fatal).
The builds carry rpc_profile.py's instrumentation; with --profile it is switched on and each RPC run's per-token
messages are in the results too. They also carry sched_profile.py's, always on in the head (a few clock reads a
token): per token, the head's time copying each kind of input and launching each backend's part, for the split in
one process and each RPC run. --head-env NAME=K=V runs variant NAME's head with K=V (e.g. an existing build
again with CUDA graphs off). Only their counts: on the H200 machine of 2026-11-29 the profiler slowed a split
tier from 185 to 17 tokens/s (30-36 with it on one side only; the cause not found), so its timings, and a profiled
run's tokens/s, are not the build's.
Writes DIR/hop-cost.json and prints a summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import statistics
import subprocess
import time
from pathlib import Path

import httpx

from clusterbook.effects.rehearsal import healthy

FLAGS = ["-ngl", "99", "-fa", "1"]
PROMPTS = ["Write one sentence about memory bandwidth.", "The quick brown fox", "def fibonacci(n):"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROFILE = False


SPIN_US = os.environ.get("GGML_RPC_SPIN_US", "20000")  # P13's poll, on as on a tier of GPUs (20 ms: what D36 measured)


def gpu_env(bin_dir: str, gpus: str, extra: dict | None = None) -> dict:
    env = {**os.environ, "LD_LIBRARY_PATH": bin_dir, "CUDA_VISIBLE_DEVICES": gpus, "GGML_RPC_SPIN_US": SPIN_US,
           "GGML_SCHED_PROF": "1", **(extra or {})}
    if PROFILE:
        env["GGML_RPC_PROF"] = "1"
    return env


WORKER_GPU = "1"
TIMEOUT_S = int(os.environ.get("HOP_TIMEOUT_S", "900"))  # one llama-bench run (a hung experiment ends)


def start_worker(bin_dir: str, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    worker = subprocess.Popen([f"{bin_dir}/ggml-rpc-server", "-H", "127.0.0.1", "-p", str(port)],
                              env=gpu_env(bin_dir, WORKER_GPU), stdout=log.open("w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return worker, port
        time.sleep(0.1)
    raise SystemExit(f"worker did not listen: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def profile(text: str, side: str, tokens: int) -> dict:
    """Per token: messages and microseconds for each of one side's rpc-prof lines (the last report of each kind)."""
    out = {}
    for m in re.finditer(rf"rpc-prof {side} (\S+) n=(\d+) us=([\d.]+)", text):
        n, us = int(m.group(2)), float(m.group(3))
        if n >= 0.9 * tokens:  # per-token traffic, not the load's
            out[m.group(1)] = {"per_token": round(n / tokens, 2), "us_per_token": round(us / tokens, 1)}
    return out


def sched_profile(text: str, tokens: int) -> dict:
    """Per token: the head scheduler's microseconds for each backend's input copies and launches (sched-prof)."""
    return {m.group(1): round(float(m.group(3)) / tokens, 1)
            for m in re.finditer(r"sched-prof (.+?) n=(\d+) us=([\d.]+)", text) if int(m.group(2)) >= 0.9 * tokens}


def bench(bin_dir: str, model: str, n: int, reps: int, gpus: str, extra: list[str], logs: Path, name: str,
          env: dict | None = None) -> dict:
    """One llama-bench decode run: tok/s, the head's scheduler profile, with a worker (--rpc) both sides' profiles."""
    argv = [f"{bin_dir}/llama-bench", "-m", model, "-p", "0", "-n", str(n), "-r", str(reps), *FLAGS, "-o", "json",
            *extra]
    try:
        run = subprocess.run(argv, env=gpu_env(bin_dir, gpus, env), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        (logs / f"{name}.err").write_text(str(e.stderr or ""))
        raise SystemExit(f"{name}: llama-bench did not finish within {TIMEOUT_S} s") from None
    (logs / f"{name}.err").write_text(run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"{name}: llama-bench failed:\n{run.stderr[-2000:]}")
    row = json.loads(run.stdout)[0]
    tokens = n * reps + 1  # llama-bench warms up with one token
    return {"tok_s": round(row["avg_ts"], 2), "samples": [round(x, 2) for x in row["samples_ts"]],
            "head_profile": profile(run.stderr, "head", tokens), "head_sched": sched_profile(run.stderr, tokens),
            "tokens": tokens}


def bench_rpc(bin_dir: str, model: str, n: int, reps: int, logs: Path, name: str, env: dict | None = None) -> dict:
    log = logs / f"{name}.worker.log"
    worker, port = start_worker(bin_dir, log)
    try:
        result = bench(bin_dir, model, n, reps, "0", ["-sm", "layer", "-ts", "1/1", "--rpc", f"127.0.0.1:{port}"],
                       logs, name, env)
    finally:
        stop(worker)
    result["worker_profile"] = profile(log.read_text(), "worker", result["tokens"])
    return result


def serve(bin_dir: str, model: str, split: bool, logs: Path, name: str, requests: int,
          flags: list[str] = ()) -> dict:
    """llama-server's decode tok/s (median of greedy requests) and the digest of its answers."""
    worker, argv = None, [f"{bin_dir}/llama-server", "-m", model, *FLAGS[:2], "-fa", "on", "-c", "4096",
                          "--host", "127.0.0.1", *flags]
    if split:
        worker, rpc_port = start_worker(bin_dir, logs / f"{name}.worker.log")
        argv += ["-sm", "layer", "-ts", "1/1", "--rpc", f"127.0.0.1:{rpc_port}"]
    port = free_port()
    server = subprocess.Popen([*argv, "--port", str(port)], env=gpu_env(bin_dir, "0"),
                              stdout=(logs / f"{name}.server.log").open("w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(3000):
            if server.poll() is not None:
                raise SystemExit(f"{name}: llama-server exited")
            if healthy(f"http://127.0.0.1:{port}/health"):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"{name}: llama-server did not answer /health within 300 s")
        speeds, answers = [], []
        for i in range(requests + 1):
            body = {"prompt": PROMPTS[i % len(PROMPTS)], "n_predict": 128, "temperature": 0, "seed": 1,
                    "cache_prompt": False}
            reply = httpx.post(f"http://127.0.0.1:{port}/completion", json=body, timeout=600).json()
            if i > 0:  # the first warms up
                speeds.append(reply["timings"]["predicted_per_second"])
                answers.append(reply["content"])
        return {"tok_s": round(statistics.median(speeds), 2), "samples": [round(x, 2) for x in speeds],
                "answers": hashlib.sha256("\n".join(answers).encode()).hexdigest()[:16]}
    finally:
        stop(server)
        if worker:
            stop(worker)


def per_token_ms(tok_s: float) -> float:
    return 1000.0 / tok_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", action="append", required=True, help="NAME=BIN_DIR, the first is the baseline")
    parser.add_argument("--model", action="append", required=True, help="NAME=FILE[:TOKENS]")
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternated llama-bench rounds of the RPC variants")
    parser.add_argument("--worker-gpu", default="1", help="the worker's GPU (0 on a machine with one)")
    parser.add_argument("--profile", action="store_true", help="GGML_RPC_PROF=1: per-token message counts")
    parser.add_argument("--no-serve", action="store_true", help="llama-bench only, no llama-server")
    parser.add_argument("--serve-with", action="append", default=[],
                        help="NAME=FLAGS: llama-server flags served too (one GPU and the last variant's split)")
    parser.add_argument("--head-env", action="append", default=[], help="NAME=K=V: variant NAME's head runs with K=V")
    args = parser.parse_args()
    global WORKER_GPU, PROFILE
    WORKER_GPU, PROFILE = args.worker_gpu, args.profile
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    variants = dict(v.split("=", 1) for v in args.variant)
    base = next(iter(variants.values()))
    head_env: dict = {}
    for spec in args.head_env:
        name, _, kv = spec.partition("=")
        key, _, value = kv.partition("=")
        head_env.setdefault(name, {})[key] = value
    results: dict = {}
    for spec in args.model:
        name, _, rest = spec.partition("=")
        path, _, tokens = rest.partition(":")
        n = int(tokens or 128)
        reps = 5 if n >= 128 else 3
        r = results[name] = {"tokens": n, "rpc": {v: [] for v in variants}, "served": {}}
        r["one_gpu_rounds"], r["local_split_rounds"] = [], []
        for round_ in range(1, args.rounds + 1):  # the baselines in every round too: a GPU's drift cancels
            print(f"== {name}: one GPU, split in one process, round {round_}", flush=True)
            r["one_gpu_rounds"].append(bench(base, path, n, reps, "0", [], logs, f"{name}-one-gpu-{round_}"))
            if WORKER_GPU != "0":
                r["local_split_rounds"].append(bench(base, path, n, reps, "0,1", ["-sm", "layer", "-ts", "1/1"],
                                                     logs, f"{name}-local-split-{round_}"))
            for v, bin_dir in variants.items():
                print(f"== {name}: RPC split, {v}, round {round_}", flush=True)
                r["rpc"][v].append(bench_rpc(bin_dir, path, n, reps, logs, f"{name}-rpc-{v}-{round_}",
                                             head_env.get(v)))
                (out / "hop-cost.json").write_text(json.dumps(results, indent=1))  # what a later failure leaves
        r["one_gpu"] = max(r["one_gpu_rounds"], key=lambda x: x["tok_s"])
        if r["local_split_rounds"]:
            r["local_split"] = max(r["local_split_rounds"], key=lambda x: x["tok_s"])
        if args.no_serve:
            summary(name, r)
            continue
        print(f"== {name}: served", flush=True)
        r["served"]["one_gpu"] = serve(base, path, False, logs, f"{name}-served-one-gpu", args.requests)
        for v, bin_dir in variants.items():
            r["served"][v] = serve(bin_dir, path, True, logs, f"{name}-served-{v}", args.requests)
        last, last_dir = list(variants.items())[-1]
        r["served_with"] = {}
        for spec_ in args.serve_with:
            cfg, _, flags = spec_.partition("=")
            print(f"== {name}: served with {cfg} ({flags})", flush=True)
            got = r["served_with"][cfg] = {"flags": flags}
            for target, bin_dir, split in (("one_gpu", base, False), (last, last_dir, True)):
                try:
                    got[target] = serve(bin_dir, path, split, logs, f"{name}-served-{cfg}-{target}", args.requests,
                                        flags.split())
                except SystemExit as e:  # a flag this build refuses is a result, not the run's end
                    got[target] = {"error": str(e)[-300:]}
        (out / "hop-cost.json").write_text(json.dumps(results, indent=1))
        summary(name, r)
    (out / "hop-cost.json").write_text(json.dumps(results, indent=1))


def summary(name: str, r: dict) -> None:
    one = r["one_gpu"]["tok_s"]
    local = r["local_split"]["tok_s"] if "local_split" in r else one
    print(f"\n{name}: llama-bench tg{r['tokens']}: one GPU {one} tok/s; split in one process {local} tok/s "
          f"(+{per_token_ms(local) - per_token_ms(one):.3f} ms/token)" if "local_split" in r else
          f"\n{name}: llama-bench tg{r['tokens']}: one GPU {one} tok/s (the worker shares it)")
    if r.get("local_split_rounds"):
        print("  per round: one GPU " + ", ".join(str(x["tok_s"]) for x in r["one_gpu_rounds"])
              + "; split in one process " + ", ".join(str(x["tok_s"]) for x in r["local_split_rounds"]))
        print("    the head's scheduler, us/token: " + sched_line(r["local_split_rounds"][-1]))
    for v, runs in r["rpc"].items():
        best = max(x["tok_s"] for x in runs)
        if len(r.get("local_split_rounds", [])) == len(runs):  # each round's RPC run against its own baseline
            paired = sorted(per_token_ms(x["tok_s"]) - per_token_ms(y["tok_s"])
                            for x, y in zip(runs, r["local_split_rounds"]))
            print(f"  RPC {v}: a hop against the same round's split in one process: "
                  f"{', '.join(f'{h:+.3f}' for h in paired)} ms (median {statistics.median(paired):+.3f})")
        against_local = (f", +{per_token_ms(best) - per_token_ms(local):.3f} against the split in one process"
                         if "local_split" in r else "")
        print(f"  RPC {v}: {[x['tok_s'] for x in runs]} tok/s; a hop +{per_token_ms(best) - per_token_ms(one):.3f} "
              f"ms/token against one GPU{against_local}; {best / one:.1%} of one GPU")
        print("    the head's scheduler, us/token: " + sched_line(runs[-1]))
        for side in ("head_profile", "worker_profile") if PROFILE else ():
            print(f"    {side}: " + ", ".join(f"{k} {x['per_token']}x {x['us_per_token']} us"
                                            for k, x in runs[-1][side].items()))
    served = r["served"]
    if not served:
        return
    print(f"  served: one GPU {served['one_gpu']['tok_s']} tok/s ({served['one_gpu']['answers']})")
    for v in r["rpc"]:
        s = served[v]
        print(f"  served split {v}: {s['tok_s']} tok/s = {s['tok_s'] / one:.1%} of one-GPU llama-bench, "
              f"{s['tok_s'] / served['one_gpu']['tok_s']:.1%} of one GPU served ({s['answers']})")
    for cfg, got in r.get("served_with", {}).items():
        for target, s in got.items():
            if target == "flags":
                continue
            print(f"  served with {cfg} ({got['flags']}), {target}: " + (
                s["error"].splitlines()[0] if "error" in s else
                f"{s['tok_s']} tok/s = {s['tok_s'] / one:.1%} of one-GPU llama-bench ({s['answers']})"))


def sched_line(run: dict) -> str:
    return ", ".join(f"{k} {us}" for k, us in run.get("head_sched", {}).items()) or "none"


if __name__ == "__main__":
    main()
