"""A cluster file's RPC tier at full size on this GPU machine, each GPU held to the memory of the file's card.

    python3 full_size.py CLUSTER.yaml TIER --bin DIR --models DIR --out DIR [--only sweep,file,...] [--card-mib N]

The tier's own rendered command lines (head and workers, split, flags; no NUMA binding) run on loopback, the head on
GPU 0 and each worker on the next GPU. Before each run a ballast process takes every GPU's memory down to what the
file's card has (--card-mib: what cudaMemGetInfo reports on that card), so a buffer the plan misses is an
out-of-memory here as it would be there. Per process and GPU, memory is sampled every 100 ms through a prompt that
fills the context; the plan for the same cluster (the file's GPU declarations, the model's GGUF header) stands
beside it. Configurations:

- sweep: the model's widths with 2 blocks (make_shaped_model.py --layers 2; compute buffers and the CUDA pool do
  not depend on the block count), at several contexts, flash attention off and on: each device's compute buffer
  and pool through a full prompt, beside the plan's;
- file: the tier as the file has it; load time, peak memory through a full-context prompt, decode at an empty and a
  full context, and a worker crash recovered as the job script does (the head stopped, the worker started, the head
  started), beside the plan's prediction;
- any NAME=key:value;key:value: the tier with those fields changed (fa128k=flash_attn:on;ctx_size:131072;...);
  keys that are not fields: crash:1 adds the worker crash, one_device:1 runs the head alone with the whole model on
  its GPU and no ballast (the local load rate and the one-GPU decode a split is compared with), load_mode:M passes
  llama.cpp's --load-mode M (mmap, none, ...), prompt:0 leaves out the prompt that fills the context, clients:N
  crashes the worker while N clients (every second one streaming) send chat completions through the gateway's hold
  (clusterbook/node/wake.py, its bound the cluster file's: issue 46): requests failed, streams resumed, added p99;
  cache_ram:M passes --cache-ram M (llama-server's host-memory prompt cache), switch:N sends two conversations of N
  tokens in turn (A, B, A, B; 8 tokens each), as clients that take turns on one slot do: each request's time beside
  the server's own prompt and decode time, and the prompt cache's saves in the head's log; head_crash:N kills the
  head N times, the workers still running, and starts it again as its unit or job script does: seconds to /health,
  the bytes loopback carried meanwhile (the workers' share sent again, or not where they keep it: issue 48), and
  whether a greedy answer is the same as before the crash; prompts:N/N/... sends one prompt of each length (after a
  short one that warms the kernels and the pool up), each asking for one token: the time to first token, the
  server's prompt time and rate (issue 48: beside the planner's prompt estimate).

On a machine with one GPU the head and the worker share it (each process still its own CUDA context), and the
ballast leaves the card's memory twice.

Every run logs with timestamps, and samples loopback's received bytes every 100 ms through the load: the RPC
transfer's window and rate beside the whole load's, so a slow load is split into its local and its RPC part.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import yaml

import clusterbook.node
from clusterbook.effects import rehearsal
from clusterbook.effects.rehearsal import Rehearsal
from clusterbook.model.loader import load_cluster
from clusterbook.model.schema import Cluster
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.capacity import GIB, plan_rpc_tier
from clusterbook.pure.planner.loadtime import hold_s, predict_load, whole_s
from clusterbook.pure.planner.shape import from_gguf

MIB = 2**20
NODE = Path(clusterbook.node.__file__).parent
BUFFER = re.compile(r"(?P<what>load_tensors|llama_kv_cache|sched_reserve):\s+(?P<dev>CUDA\d+|RPC\d+)\S*\s+"
                    r"(?P<kind>model|KV|compute) buffer size =\s+(?P<mib>[\d.]+) MiB")
SWEEP = [  # (ctx, K, V, flash attention, ubatch)
    (8192, "q4_0", "f16", "off", 512), (16384, "q4_0", "f16", "off", 512), (32768, "q4_0", "f16", "off", 512),
    (32768, "q4_0", "f16", "off", 256), (32768, "q4_0", "f16", "on", 512), (32768, "q4_0", "q4_0", "on", 512),
    (65536, "q4_0", "q4_0", "on", 512), (131072, "q4_0", "q4_0", "on", 512)]


def log(*args) -> None:
    print(time.strftime("%H:%M:%S"), *args, flush=True)


def device_cluster(src: dict, tier_name: str, bin_dir: str, models_dir: str, model_file: str | None = None,
                   **changes) -> Cluster:
    """The file's tier alone on loopback: its nodes keep their GPU declarations, so the plan is the file's plan."""
    tier = dict(next(t for t in src["tiers"] if t["name"] == tier_name))
    for key in ("slurm", "on_demand", "api_key"):
        tier.pop(key, None)
    tier.update(manager="systemd", numa_bind=False, **changes)
    names = [tier["head"], *tier["workers"]]
    nodes = []
    for i, name in enumerate(names):
        node = {k: v for k, v in next(n for n in src["nodes"] if n["name"] == name).items()
                if k not in ("jump", "ssh_host", "addresses")}
        node["addresses"] = {"management": f"127.0.0.{i + 11}", "fabric": f"127.0.1.{i + 11}"}
        nodes.append(node)
    fabric = next(n for n in src["networks"].values() if n.get("role") == "fabric")
    model = dict(next(m for m in src["models"] if m["id"] == tier["model"]))
    if model_file:
        path = Path(models_dir) / model_file
        model.update(file=model_file, size_bytes=path.stat().st_size,
                     architecture={**model["architecture"], "layers": from_gguf(path).layers})
    planner = {k: v for k, v in src.get("planner", {}).items() if k not in ("co_reside",) and not k.startswith("site_")}
    data = {
        "cluster": {"name": "full-size", "description": f"{src['cluster']['name']}'s {tier_name} tier on one machine"},
        "access": {"user": "root"},
        "networks": {"management": {"role": "management", "link": "ethernet", "subnet": "127.0.0.0/24",
                                    "bandwidth_gbps": 10},
                     "fabric": {**fabric, "subnet": "127.0.1.0/24"}},
        "nodes": nodes,
        "engine": {"build": src["engine"]["build"], "install_dir": bin_dir,
                   "patches": src["engine"].get("patches", [])},
        "storage": {"models_dir": models_dir},
        "models": [model],
        "tiers": [tier],
        "planner": planner,
        "targets": [t for t in src.get("targets", []) if t["tier"] == tier_name],
    }
    return Cluster.model_validate(data)


class NoGpu:
    """Stands in for Ballast and Sampler on a machine without GPUs (a smoke test of this script)."""

    def __init__(self, *args):
        self.free_mib: list[int] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def peak_mib(self, *args):
        return None

    gpu_peak_mib = peak_mib


class Ballast:
    """A process holding each GPU's memory down to card_mib free (as cudaMemGetInfo reports it)."""

    CODE = """
import json, sys, time, torch
keep = int(sys.argv[1]) << 20
hold, free = [], []
for i in range(torch.cuda.device_count()):
    torch.cuda.set_device(i)
    f, _ = torch.cuda.mem_get_info(i)
    hold.append(torch.empty(max(0, f - keep), dtype=torch.uint8, device=i))
    free.append(torch.cuda.mem_get_info(i)[0] >> 20)
print(json.dumps(free), flush=True)
time.sleep(1e9)
"""

    def __init__(self, card_mib: int):
        self.card_mib = card_mib

    def __enter__(self) -> Ballast:
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(self.card_mib)], stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.free_mib = json.loads(self.proc.stdout.readline())
        log(f"ballast: each GPU has {self.free_mib} MiB free (the card: {self.card_mib} MiB)")
        return self

    def __exit__(self, *exc) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        time.sleep(1)


class LoopbackBytes:
    """Loopback's received bytes every 100 ms (the RPC workers' weights arrive through it): when the transfer ran
    and at what rate."""

    def __init__(self):
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()

    @staticmethod
    def rx() -> int:
        for line in Path("/proc/net/dev").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])
        return 0

    def __enter__(self) -> LoopbackBytes:
        self.t0 = time.time()
        def loop():
            while not self._stop.is_set():
                self.samples.append((time.time() - self.t0, self.rx()))
                time.sleep(0.1)
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> dict:
        """Seconds from the start when 1 % and 99 % of the bytes had arrived, and the rate between."""
        if len(self.samples) < 2:
            return {}
        base, total = self.samples[0][1], self.samples[-1][1] - self.samples[0][1]
        if total < 1e8:
            return {"bytes": total}
        start = next(t for t, b in self.samples if b - base >= 0.01 * total)
        end = next(t for t, b in self.samples if b - base >= 0.99 * total)
        return {"bytes": total, "start_s": round(start, 2), "end_s": round(end, 2),
                "gbs": round(0.98 * total / max(end - start, 0.1) / 1e9, 2)}


class Sampler:
    """nvidia-smi every 100 ms: each compute process's memory and each GPU's."""

    def __init__(self, path: Path):
        self.apps, self.gpus = path.with_suffix(".apps.csv"), path.with_suffix(".gpus.csv")

    def __enter__(self) -> Sampler:
        smi = ["nvidia-smi", "--format=csv,noheader,nounits", "-lms", "100"]
        self.procs = [subprocess.Popen(smi + ["--query-compute-apps=pid,used_memory"], stdout=self.apps.open("w")),
                      subprocess.Popen(smi + ["--query-gpu=index,memory.used"], stdout=self.gpus.open("w"))]
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
            p.wait()

    def peak_mib(self, pid: int) -> int | None:
        values = [int(v) for p, v in _rows(self.apps) if p == str(pid) and v.isdigit()]
        return max(values) if values else None

    def gpu_peak_mib(self, index: int) -> int | None:
        values = [int(v) for i, v in _rows(self.gpus) if i == str(index) and v.isdigit()]
        return max(values) if values else None


def _rows(path: Path):
    for line in path.read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2:
            yield parts


def buffers(log_path: Path) -> dict[str, dict[str, float]]:
    """MiB per device and kind (model, KV, compute) from llama-server's log: its last load's."""
    out: dict[str, dict[str, float]] = {}
    for m in BUFFER.finditer(log_path.read_text(errors="replace")):
        out.setdefault(m["dev"], {})[m["kind"]] = float(m["mib"])
    return out


def complete(url: str, n_prompt: int, n_predict: int) -> dict:
    """A completion of n_prompt random byte tokens; the server's own timings."""
    tokens = [random.randint(3, 258) for _ in range(n_prompt)]
    t0 = time.time()
    r = httpx.post(url + "/completion", json={"prompt": tokens, "n_predict": n_predict, "cache_prompt": False,
                                              "ignore_eos": True, "temperature": 0}, timeout=1800)
    r.raise_for_status()
    t = r.json()["timings"]
    return {"prompt_tokens": t["prompt_n"], "prompt_s": round(t["prompt_ms"] / 1000, 2),
            "prompt_tps": round(t["prompt_per_second"], 1), "decode_tokens": t["predicted_n"],
            "decode_tps": round(t["predicted_per_second"], 2), "wall_s": round(time.time() - t0, 2)}


def switches(url: str, n_prompt: int, head_log: Path) -> dict:
    """Two conversations of n_prompt random tokens taking turns on the tier's slot (A, B, A, B), each asking for 8
    tokens with its prompt cached as a chat client's is: each request's wall time, the server's prompt and decode
    time, and what is left (the prompt cache's save and restore), with the head log's "prompt cache update" times."""
    rng = random.Random(1)
    prompts = {name: [rng.randint(3, 258) for _ in range(n_prompt)] for name in "AB"}
    before = len(re.findall(r"prompt cache update took", head_log.read_text(errors="replace")))
    turns = []
    for name in "ABAB":
        t0 = time.time()
        r = httpx.post(url + "/completion", json={"prompt": prompts[name], "n_predict": 8, "cache_prompt": True,
                                                  "ignore_eos": True, "temperature": 0}, timeout=1800)
        r.raise_for_status()
        t, wall = r.json()["timings"], time.time() - t0
        turns.append({"conversation": name, "wall_s": round(wall, 2), "prompt_n": t["prompt_n"],
                      "prompt_s": round(t["prompt_ms"] / 1000, 2), "decode_s": round(t["predicted_ms"] / 1000, 2),
                      "else_s": round(wall - (t["prompt_ms"] + t["predicted_ms"]) / 1000, 2)})
    updates = re.findall(r"prompt cache update took ([\d.]+) ms", head_log.read_text(errors="replace"))[before:]
    return {"tokens": n_prompt, "turns": turns, "cache_update_ms": [float(u) for u in updates]}


def plan_rows(c: Cluster, plan, gpu_of: dict[str, int]) -> list[dict]:
    return [{"device": d.device, "node": d.node, "gpu": gpu_of.get(d.node), "weights_gib": d.weights / GIB,
             "kv_gib": d.kv / GIB, "compute_gib": d.compute / GIB, "pool_gib": getattr(d, "pool", 0) / GIB,
             "overhead_gib": d.overhead / GIB, "total_gib": d.total / GIB,
             "capacity_gib": d.capacity / GIB if d.capacity else None} for d in plan.devices]


def run(c: Cluster, model_path: Path, out: Path, name: str, card_mib: int, prompt_tokens: int | None,
        crash: bool = False, save=lambda result: None, one_device: bool = False, head_extra: tuple = (),
        clients: int = 0, hold: tuple[int, int] = (0, 0), switch: int = 0, head_crash: int = 0,
        prompts: tuple[int, ...] = ()) -> dict:
    """One configuration: start the tier under the ballast, fill its context, sample memory; optionally crash a
    worker and bring the tier back as the job script does."""
    tier = c.tiers[0]
    plan = plan_rpc_tier(c, tier, from_gguf(model_path))
    gpu_of = {node: i for i, node in enumerate(tier.nodes)}
    result: dict = {"name": name, "ctx": tier.ctx_size, "flash_attn": tier.flash_attn, "ubatch": tier.ubatch_size,
                    "cache": [tier.cache_type_k, tier.cache_type_v], "model_bytes": model_path.stat().st_size,
                    "plan": plan_rows(c, plan, gpu_of), "plan_fits": plan.fits}
    logs = out / "logs" / name
    log(f"{name}: ctx {tier.ctx_size}, FA {tier.flash_attn}, ubatch {tier.ubatch_size}, "
        f"K {tier.cache_type_k} V {tier.cache_type_v}; plan: " +
        ", ".join(f"{d.device} {d.total / GIB:.2f} GiB" for d in plan.devices))
    url = f"http://{c.node(tier.head).addresses['management']}:{tier.port}"
    gpus = bool(os.environ.get("CUDA_VISIBLE_DEVICES", "x")) and subprocess.run(
        ["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0
    with (Ballast if gpus and not one_device else NoGpu)(card_mib) as ballast, \
            (Sampler if gpus else NoGpu)(out / name) as sampler:
        result["ballast_free_mib"] = ballast.free_mib
        time.sleep(0.5)
        baseline = {i: sampler.gpu_peak_mib(i) for i in range(len(ballast.free_mib))}
        t0 = time.time()
        try:
            with LoopbackBytes() as lo, Rehearsal(c, tier, logs, one_device=one_device,
                                                  head_extra=("-lv", "4", "--log-timestamps", *head_extra)) as r:
                result["load_s"] = round(time.time() - t0, 2)
                lo.stop()
                result["rpc_transfer"] = lo.summary()
                log(f"{name}: load {result['load_s']} s; RPC transfer {result['rpc_transfer']}")
                save(result)
                pids = {n: p.pid for n, p in r.processes}
                time.sleep(1)
                result["idle_mib"] = {n: sampler.peak_mib(pid) for n, pid in pids.items()}
                if prompts:
                    complete(url, 512, 1)  # kernels loaded, the pool grown: not counted
                    result["prompts"] = []
                    for n in prompts:
                        result["prompts"].append(complete(url, n, 1))
                        log(f"{name}: prompt of {n} tokens {result['prompts'][-1]}")
                        save(result)
                if prompt_tokens:
                    result["full"] = complete(url, prompt_tokens, 32)
                    log(f"{name}: full prompt {result['full']}")
                    save(result)
                result["decode_empty"] = complete(url, 64, 256)
                log(f"{name}: decode at an empty context {result['decode_empty']}")
                save(result)
                if switch:
                    result["switch"] = switches(url, switch, logs / "head.log")
                    log(f"{name}: conversations taking turns {result['switch']}")
                    save(result)
                if head_crash:
                    result["head_crashes"] = head_crashes(r, url, head_crash)
                    save(result)
                if crash and clients:
                    result["recovery"], result["clients"] = through_the_hold(r, c, url, clients, hold, logs)
                    log(f"{name}: recovery {result['recovery']}; clients {result['clients']}")
                elif crash:
                    result["recovery"] = recover(r, c, url)
                    log(f"{name}: recovery {result['recovery']}")
                result["peak_mib"] = {n: sampler.peak_mib(pid) for n, pid in pids.items()}
                save(result)
        except (RuntimeError, httpx.HTTPError) as e:
            result["error"] = str(e)[-2000:]
            log(f"{name}: FAILED {str(e)[-600:]}")
        result["gpu_peak_mib"] = {i: (sampler.gpu_peak_mib(i) or 0) - (baseline[i] or 0) for i in baseline}
    for f in logs.glob("*.log"):
        result.setdefault("buffers", {})[f.stem] = buffers(f)
        text = f.read_text(errors="replace")
        result.setdefault("oom", {})[f.stem] = bool(re.search(r"out of memory|cudaMalloc failed|failed to allocate",
                                                              text, re.I))
    load = predict_load(c, tier, plan)
    result["predicted"] = {"load_s": round(load.load_s, 1), "recovery_s": round(load.recovery_s, 1),
                           "head_recovery_s": round(load.head_recovery_s, 1), "local_s": round(load.local_s, 1),
                           "hash_s": round(load.hash_s, 1), "restart_s": load.restart_s,
                           "decode_bound_tps": plan.decode_bound_tps, "decode_bound_full_tps":
                           plan.decode_bound_full_ctx_tps}
    return result


def recover(r: Rehearsal, c: Cluster, url: str) -> dict:
    """SIGKILL the first worker; then what the job script does: its 1 s watch sees the step gone, stops the head
    (SIGTERM, a second after 1 s), starts the worker step, waits for its port, starts the head. Seconds from the
    kill."""
    tier = c.tiers[0]
    worker = f"rpc-{tier.workers[0]}"
    t0 = time.time()
    os.killpg(r.pid(worker), signal.SIGKILL)
    marks = {}
    time.sleep(1.0)  # the script's watch: at most a second
    r.stop(worker)
    r.stop("head")
    marks["head_stopped_s"] = time.time() - t0
    r.start_worker(tier.workers[0])
    marks["worker_port_s"] = time.time() - t0
    r.start_head()
    marks["healthy_s"] = time.time() - t0
    complete(url, 16, 4)
    marks["answered_s"] = time.time() - t0
    return {k: round(v, 2) for k, v in marks.items()}


def greedy(url: str) -> str:
    """The same 32 tokens' greedy continuation of a fixed prompt, as text (compared across restarts)."""
    r = httpx.post(url + "/completion", json={"prompt": list(range(3, 67)), "n_predict": 32, "cache_prompt": False,
                                              "ignore_eos": True, "temperature": 0, "return_tokens": True},
                   timeout=600)
    r.raise_for_status()
    return json.dumps(r.json().get("tokens") or r.json()["content"])


def head_crashes(r: Rehearsal, url: str, count: int) -> list[dict]:
    """SIGKILL the head `count` times, its workers still running, and start it again (systemd's restart, or the
    job script's): seconds from the start to /health, what loopback carried meanwhile, and the greedy answer's
    sameness."""
    before, out = greedy(url), []
    for _ in range(count):
        os.killpg(r.pid("head"), signal.SIGKILL)
        time.sleep(1.0)  # the workers see their client go (and keep its weights, where they are told to)
        t0 = time.time()
        with LoopbackBytes() as lo:
            r.start_head()
            back = time.time() - t0
        out.append({"healthy_s": round(back, 2), "loopback": lo.summary(), "same_answer": greedy(url) == before})
        log(f"head crash: back in {back:.2f} s; {out[-1]}")
    return out


def through_the_hold(r: Rehearsal, c: Cluster, url: str, clients: int, hold: tuple[int, int], logs: Path):
    """The worker crash of recover() while `clients` clients ask through the gateway's hold service (its bound and
    Retry-After: `hold`), started here on loopback in front of the head."""
    from clusterbook.effects.faults import run_fault

    tier = c.tiers[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = logs / "hold.json"
    config.write_text(json.dumps({"port": port, "tiers": {}, "routes": {tier.name: {
        "backend": url.split("//", 1)[1], "hold_s": hold[0], "retry_after": hold[1], "timeout_s": tier.timeout_s}}}))
    marks: dict = {}
    with open(logs / "hold.log", "w") as out:
        service = subprocess.Popen([sys.executable, str(NODE / "wake.py"), str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(50):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            time.sleep(0.1)
        run = run_fault(c, None, tier, "worker killed", f"http://127.0.0.1:{port}/v1/chat/completions", None,
                        clients, 2 * hold[0] + 60, progress=log, act=lambda: marks.update(recover(r, c, url)),
                        stream_tokens=200, headers={"X-Clusterbook-Tier": tier.name})
    finally:
        os.killpg(service.pid, signal.SIGKILL)
    requests = sorted((q.sent_s, q.took_s, q.stream, q.outcome, q.resumed, q.warmup) for q in run.requests)
    return marks, {**run.to_json(), "hold_s": hold[0], "requests_s": requests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cluster")
    ap.add_argument("tier")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="sweep,file")
    ap.add_argument("--card-mib", type=int, default=32510, help="free memory per GPU, as the card reports it")
    ap.add_argument("--small-model", default="small.gguf")
    args = ap.parse_args()
    src = yaml.safe_load(Path(args.cluster).read_text())
    whole = load_cluster(args.cluster)  # the gateway's hold for the tier: the file's bound and Retry-After
    tier = whole.tier(args.tier)
    plan = plan_tier(whole, tier)
    hold = (hold_s(whole, tier, plan), whole_s(predict_load(whole, tier, plan).recovery_s))
    if len(subprocess.run(["sh", "-c", "nvidia-smi -L 2>/dev/null"], capture_output=True, text=True).stdout
           .splitlines()) == 1:  # one GPU: the head and the worker share it, with twice the card's memory free
        rehearsal.gpu_assignment = lambda c, t: dict.fromkeys(t.nodes, "0")
        args.card_mib *= 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    random.seed(0)
    for item in args.only.split(","):
        name, _, spec = item.partition("=")
        changes = dict(kv.split(":", 1) for kv in spec.split(";") if kv) if spec else {}
        changes = {k: int(v) if v.isdigit() else v for k, v in changes.items()}
        crash = bool(changes.pop("crash", name == "file"))
        one_device = bool(changes.pop("one_device", 0))
        prompt = bool(changes.pop("prompt", 1)) and not one_device
        head_extra = ("--load-mode", changes.pop("load_mode")) if "load_mode" in changes else ()
        clients, switch = int(changes.pop("clients", 0)), int(changes.pop("switch", 0))
        head_crash = int(changes.pop("head_crash", 0))
        prompts = tuple(int(n) for n in str(changes.pop("prompts", "")).split("/") if n)
        if "cache_ram" in changes:
            head_extra += ("--cache-ram", str(changes.pop("cache_ram")))
        if name == "sweep":
            for ctx, k, v, fa, ub in SWEEP:
                c = device_cluster(src, args.tier, args.bin, args.models, args.small_model, ctx_size=ctx,
                                   cache_type_k=k, cache_type_v=v, flash_attn=fa, ubatch_size=ub, batch_size=ub)
                results.append(run(c, Path(args.models) / args.small_model, out, f"sweep-{ctx}-{k}-{v}-fa{fa}-ub{ub}",
                                   args.card_mib, ctx - 64))
                (out / "full-size.json").write_text(json.dumps(results, indent=1))
            continue
        c = device_cluster(src, args.tier, args.bin, args.models, **changes)
        model = Path(args.models) / c.models[0].file
        if from_gguf(model).layers != c.models[0].architecture.layers:  # a smoke test's 2-block model
            c = device_cluster(src, args.tier, args.bin, args.models, c.models[0].file, **changes)
        def save(partial: dict) -> None:  # each phase as it ends: a run cut short keeps what it measured
            (out / "full-size.json").write_text(json.dumps(results + [partial], indent=1))
        results.append(run(c, model, out, name, args.card_mib, c.tiers[0].ctx_size - 64 if prompt else None,
                           crash, save, one_device, head_extra, clients, hold, switch, head_crash, prompts))
        (out / "full-size.json").write_text(json.dumps(results, indent=1))
    log("done")


if __name__ == "__main__":
    main()
