"""Does sampling cost the server path? Decode tok/s with default vs greedy top_k=1 requests, one GPU and RPC."""

import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from clusterbook.effects.benchmark import PROMPTS
from clusterbook.effects.probes import chat
from clusterbook.effects.rehearsal import Rehearsal
from clusterbook.model.loader import load_cluster

VARIANTS = {"default": {}, "top_k=1": {"top_k": 1}, "samplers=[top_k],top_k=1": {"samplers": ["top_k"], "top_k": 1}}


def measure(url: str, label: str) -> None:
    chat(url, "m", max_tokens=8)
    for name, extra in VARIANTS.items():
        answers = [chat(url, "m", max_tokens=128, prompt=PROMPTS["code"], extra=extra) for _ in range(3)]
        runs = [a["timings"]["predicted_per_second"] for a in answers]
        print(f"{label:>12} {name:<28} decode median {statistics.median(runs):6.1f} tok/s",
              [round(r, 1) for r in runs])


BIN = "/tmp/llama/build/bin"
one = subprocess.Popen([f"{BIN}/llama-server", "-m", "/tmp/models/random-8b-q8_0.gguf", "--host", "127.0.0.1",
                        "--port", "18090", "-ngl", "999", "--ctx-size", "4096", "--parallel", "1", "-b", "512",
                        "-ub", "512", "-fa", "on"], env={"LD_LIBRARY_PATH": BIN, "CUDA_VISIBLE_DEVICES": "0"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while True:
    try:
        if httpx.get("http://127.0.0.1:18090/health", timeout=2).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.5)
measure("http://127.0.0.1:18090", "one GPU")
one.terminate()
one.wait()
c = load_cluster(sys.argv[1])
tier = c.tier("reasoning")
with Rehearsal(c, tier, Path("reports/rehearsal")):
    measure(f"http://127.0.0.1:{tier.port}", "RPC, 2 GPUs")
