"""Does an RPC hop's per-token cost grow with the layers on the head or on the worker? (issue 48)

The 72B-shaped model's hop (0.55 ms a token, 2 x H200) is about twice the 8B's (0.28 ms) with the same messages per
token. One build, one model, the layer split moved: for each tensor split, llama-bench decode split over RPC (the
worker, on GPU 1, holds the first share: llama.cpp lists RPC devices first) and the same split in one process over
both GPUs; a hop = the difference. Alternated rounds; writes DIR/hop-split.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import hop_cost
from hop_cost import bench, per_token_ms, start_worker, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--bin", required=True, help="the build's bin folder")
    parser.add_argument("--model", required=True, help="NAME=FILE[:TOKENS]")
    parser.add_argument("--split", action="append", required=True, help="a tensor split, first share first: 1/3")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name, _, rest = args.model.partition("=")
    path, _, tokens = rest.partition(":")
    n = int(tokens or 128)
    reps = 5 if n >= 128 else 3
    hop_cost.WORKER_GPU = "1"
    results: dict = {s: {"local": [], "rpc": []} for s in args.split}
    for round_ in range(1, args.rounds + 1):
        for split in args.split:
            tag = f"{name}-{split.replace('/', 'to')}-{round_}"
            print(f"== {name} {split}, round {round_}", flush=True)
            local = bench(args.bin, path, n, reps, "0,1", ["-sm", "layer", "-ts", split], logs, f"{tag}-local")
            worker, port = start_worker(args.bin, logs / f"{tag}.worker.log")
            try:
                rpc = bench(args.bin, path, n, reps, "0", ["-sm", "layer", "-ts", split, "--rpc",
                                                           f"127.0.0.1:{port}"], logs, f"{tag}-rpc")
            finally:
                stop(worker)
            results[split]["local"].append(local["tok_s"])
            results[split]["rpc"].append(rpc["tok_s"])
            (out / "hop-split.json").write_text(json.dumps({"model": name, "tokens": n, "splits": results}, indent=1))
    print(f"\n{name}: llama-bench tg{n}, a hop = split over RPC less the same split in one process")
    for split, r in results.items():
        local, rpc = statistics.median(r["local"]), statistics.median(r["rpc"])
        print(f"  -ts {split} (worker's share first): in one process {r['local']} tok/s, over RPC {r['rpc']} tok/s; "
              f"a hop {per_token_ms(rpc) - per_token_ms(local):+.3f} ms/token (medians)")


if __name__ == "__main__":
    main()
