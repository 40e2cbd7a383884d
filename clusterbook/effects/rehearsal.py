"""Run an RPC tier's rendered command lines as local processes on one machine: workers first, then the head."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from clusterbook.model.schema import Cluster, RpcTier
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.render.artifacts import ld_library_path, server_exec


def localize(c: Cluster, install_dir: str | None, models_dir: str | None) -> Cluster:
    """The same cluster with this machine's binary and model directories."""
    engine = c.engine.model_copy(update={"install_dir": install_dir}) if install_dir else c.engine
    storage = c.storage.model_copy(update={"models_dir": models_dir}) if models_dir else c.storage
    return c.model_copy(update={"engine": engine, "storage": storage})


def gpu_assignment(c: Cluster, tier: RpcTier) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES per node: the head's GPUs first (GPU 0), then each worker's, in order."""
    assignment, next_gpu = {}, 0
    for node in tier.nodes:
        count = len(c.node(node).gpu_devices)
        if count:
            assignment[node] = ",".join(str(i) for i in range(next_gpu, next_gpu + count))
            next_gpu += count
    return assignment


def one_device_argv(argv: list[str]) -> list[str]:
    """The head's command line without its RPC workers: the same flags on the head's own device."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--rpc", "--tensor-split"):
            skip = True
        else:
            out.append(arg)
    return out


def head_argv(c: Cluster, tier: RpcTier, one_device: bool = False) -> list[str]:
    """The unit's ExecStart for the head, without the NUMA binding (this machine's layout is not the node's)."""
    argv = [a for a in server_exec(c, tier) if not a.startswith(("/usr/bin/numactl", "--cpunodebind", "--membind"))]
    return one_device_argv(argv) if one_device else argv


def head_first_gpu(c: Cluster, tier: RpcTier) -> str:
    """CUDA_VISIBLE_DEVICES for the head's first GPU alone ("" where the head has none)."""
    return gpu_assignment(c, tier).get(tier.head, "").split(",")[0]


class Rehearsal:
    """Context manager: the tier's processes, started with the unit's argv, stopped on exit.

    with_head=False starts the workers alone (llama-bench becomes their client); one_device=True starts the head
    alone on its first GPU with the same flags and no RPC workers (the baseline a split is compared with).
    """

    def __init__(self, c: Cluster, tier: RpcTier, log_dir: Path, with_head: bool = True, one_device: bool = False,
                 head_extra: tuple[str, ...] = ()):
        for node in tier.nodes:
            for address in c.node(node).addresses.values():
                if not address.startswith("127."):
                    raise ValueError(f"a rehearsal runs on this machine: {node}'s address {address} is not loopback")
        self.c, self.tier, self.log_dir, self.with_head, self.one_device = c, tier, log_dir, with_head, one_device
        self.head_extra = list(head_extra)  # e.g. -lv 4: llama.cpp logs its buffer sizes at verbosity 4
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def _start(self, name: str, node: str, argv: list[str]) -> None:
        env = {**os.environ, "LD_LIBRARY_PATH": ld_library_path(self.c),
               **{key: value for key, value, _ in fl.rpc_env(self.c, self.tier)}}
        gpus = gpu_assignment(self.c, self.tier)
        env["CUDA_VISIBLE_DEVICES"] = head_first_gpu(self.c, self.tier) if self.one_device else gpus.get(node, "")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.processes = [(n, p) for n, p in self.processes if n != name or p.poll() is None] + [(name, proc)]

    def __enter__(self) -> Rehearsal:
        workers = [] if self.one_device else self.tier.workers
        for worker in workers:
            self.start_worker(worker)
        if self.with_head:
            self.start_head()
        return self

    def start_worker(self, node: str) -> subprocess.Popen:
        """A worker, as its unit or job step starts it; returns once its port answers."""
        self._start(f"rpc-{node}", node, fl.worker_argv(self.c, self.tier, node))
        endpoint = topo.rpc_endpoints(self.c, self.tier)[self.tier.workers.index(node)]
        host, port = endpoint.split(":")
        self._wait(lambda: _port_open(host, int(port)), f"RPC worker {endpoint}", 60)
        return self.processes[-1][1]

    def start_head(self) -> subprocess.Popen:
        """The head, as its unit or job step starts it; returns once /health answers 200."""
        self._start("head-one-device" if self.one_device else "head", self.tier.head,
                    head_argv(self.c, self.tier, self.one_device) + self.head_extra)
        url = topo.endpoint_url(self.c, self.tier) + "/health"
        self._wait(lambda: healthy(url), f"{url} answering 200", 900)
        return self.processes[-1][1]

    def _wait(self, ready, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            for name, proc in self.processes:
                if proc.poll() is not None:
                    tail = (self.log_dir / f"{name}.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n{tail}")
            time.sleep(0.1)
        raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")

    def pid(self, name: str) -> int:
        return next(p.pid for n, p in self.processes if n == name)

    def stop(self, name: str, grace_s: float = 1.0) -> None:
        """Stop one process as the job script's guard does (SIGTERM, a second one after grace_s, then SIGKILL) and
        forget it."""
        for proc in [p for n, p in self.processes if n == name]:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                if proc.poll() is not None:
                    break
                os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
        self.processes = [(n, p) for n, p in self.processes if n != name]

    def __exit__(self, *exc) -> None:
        for _, proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _port_open(host: str, port: int) -> bool:
    # Only before the head connects: an RPC worker serves one client at a time (seed 004's lesson).
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def healthy(url: str) -> bool:
    """Whether url answers 200 now (llama-server's /health: the model is loaded)."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
