"""Where does the RPC tier lose decode speed behind llama-server? One server flag or setting changed at a time.

Usage (device machine, after build.sh): python3 benchmarks/device/server_path.py CLUSTER_FILE OUT_DIR SET [LOG_DIR]
(SET: a key of VARIANT_SETS).
The head's command line is the rendered one (clusterbook.flags); each variant adds, replaces or sets one thing.
Decode tok/s is llama-server's own figure (timings.predicted_per_second), median of repeated plain requests.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from clusterbook.effects.benchmark import PROMPTS
from clusterbook.effects.probes import chat
from clusterbook.effects.rehearsal import head_argv
from clusterbook.model.loader import load_cluster
from clusterbook.pure import flags as fl


def replace(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


@dataclass
class Variant:
    """One change to the rendered tier: the head's argv, its environment, CPU placement of head and worker."""

    head: Callable[[list[str]], list[str]] = lambda a: a
    env: dict = field(default_factory=dict)
    head_cpus: str | None = None  # "gpu0" / "gpu1": the CPUs local to that GPU (sysfs local_cpulist)
    worker_cpus: str | None = None
    worker_args: tuple[str, ...] = ()


BS = ["--backend-sampling"]
VARIANT_SETS = {
    # first run: one server flag or setting at a time
    "flags": {
        "rendered": Variant(),
        "backend sampling (-bs)": Variant(lambda a: [*a, *BS]),
        "threads 1": Variant(lambda a: replace(a, "--threads", "1")),
        "poll 0": Variant(lambda a: [*a, "--poll", "0"]),
        "no pipeline copies (-ot none)": Variant(lambda a: [*a, "-ot", "nomatch_xyz=CPU"]),
        "graph reuse off (diagnostic)": Variant(env={"LLAMA_GRAPH_REUSE_DISABLE": "1"}),
        "CUDA graph opt": Variant(env={"GGML_CUDA_GRAPH_OPT": "1"}),
        "split 1,3 (more on the head's GPU)": Variant(lambda a: replace(a, "--tensor-split", "1,3")),
        "split 3,1 (more on the worker)": Variant(lambda a: replace(a, "--tensor-split", "3,1")),
    },
    # second run: where the processes' threads run and how they wait (threads 1 and poll 0 were slower)
    "cpu": {
        "-bs": Variant(lambda a: [*a, *BS]),
        "-bs, poll 100": Variant(lambda a: [*a, *BS, "--poll", "100"]),
        "-bs, threads 16, poll 100": Variant(lambda a: [*replace(a, "--threads", "16"), *BS, "--poll", "100"]),
        "-bs, each on its GPU's CPUs": Variant(lambda a: [*a, *BS], head_cpus="gpu0", worker_cpus="gpu1"),
        "-bs, both on GPU 0's CPUs": Variant(lambda a: [*a, *BS], head_cpus="gpu0", worker_cpus="gpu0"),
        "-bs, both on GPU 1's CPUs": Variant(lambda a: [*a, *BS], head_cpus="gpu1", worker_cpus="gpu1"),
        "-bs, prio 2 (head)": Variant(lambda a: [*a, *BS, "--prio", "2"]),
        "-bs, each on its GPU's CPUs, poll 100": Variant(lambda a: [*a, *BS, "--poll", "100"], head_cpus="gpu0",
                                                         worker_cpus="gpu1"),
    },
}


def gpu_cpus(which: str | None) -> list[str]:
    """taskset prefix for the CPUs local to a GPU ("gpu0"), from nvidia-smi's PCI bus id and sysfs."""
    if not which:
        return []
    index = which.removeprefix("gpu")
    bus = subprocess.run(["nvidia-smi", "-i", index, "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.strip().lower()
    cpus = Path(f"/sys/bus/pci/devices/{bus[-12:]}/local_cpulist").read_text().strip()
    return ["taskset", "-c", cpus]


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


def run_head(argv: list[str], env: dict, url: str, log: Path, prefix: list[str] = ()) -> dict:
    full_env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(argv[0]), "CUDA_VISIBLE_DEVICES": "0", **env}
    argv = [*prefix, *argv]
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


class Worker:
    """The tier's RPC worker on GPU 1, restarted only when its CPU placement or arguments change."""

    def __init__(self, argv: list[str], env: dict, log: Path):
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen | None = None
        self.key: tuple | None = None

    def ensure(self, variant: Variant) -> None:
        key = (variant.worker_cpus, variant.worker_args)
        if key == self.key:
            return
        self.stop()
        argv = [*gpu_cpus(variant.worker_cpus), *self.argv, *variant.worker_args]
        self.proc = subprocess.Popen(argv, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=self.env)
        self.key = key
        time.sleep(3)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


def main() -> None:
    c = load_cluster(sys.argv[1])
    out, variants = Path(sys.argv[2]), VARIANT_SETS[sys.argv[3]]
    logs = Path(sys.argv[4]) if len(sys.argv) > 4 else out
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    tier = c.tier("reasoning")
    url = f"http://127.0.0.1:{tier.port}"
    head, one = head_argv(c, tier), head_argv(c, tier, one_device=True)
    results = {}
    for name, argv in {"one GPU, rendered flags": one, "one GPU, -bs": [*one, *BS]}.items():
        results[name] = run_head(argv, {}, url, logs / f"{name.split(',')[0].replace(' ', '-')}.log")
        print(f"{name:<44} {results[name]}", flush=True)
    worker = Worker([*fl.worker_argv(c, tier, tier.workers[0]), "-c"],
                    {**os.environ, "LD_LIBRARY_PATH": c.engine.install_dir, "CUDA_VISIBLE_DEVICES": "1"},
                    logs / "worker.log")
    try:
        for name, variant in variants.items():
            try:
                worker.ensure(variant)
                results[name] = run_head(variant.head(head), variant.env, url, logs / f"head-{len(results)}.log",
                                         gpu_cpus(variant.head_cpus))
            except Exception as e:  # keep going: one broken variant must not lose the others
                results[name] = {"error": str(e)}
            print(f"{name:<44} {results[name]}", flush=True)
            (out / f"server-path-{sys.argv[3]}.json").write_text(json.dumps(results, indent=2))
            time.sleep(1)
    finally:
        worker.stop()


if __name__ == "__main__":
    main()
