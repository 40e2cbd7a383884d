"""Probes of a live tier: llama.cpp's own load report (buffers per device), HTTP health, and chat timings."""

from __future__ import annotations

import json
import json as _json
import os
import posixpath
import re
import shlex
import time
from dataclasses import dataclass, field

from clusterbook.model.schema import Cluster, RouterTier, RpcTier
from clusterbook.pure import kinds, slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import server_argv
from clusterbook.pure.render.artifacts import ld_library_path

MIB = 2**20
BUFFER = re.compile(r"(load_tensors|llama_kv_cache|sched_reserve):\s+(\S+?)(?:\[([\d.:]+)\])?\s+"
                    r"(?:model|KV|compute) buffer size =\s+([\d.]+) MiB")
OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers")


@dataclass
class LoadReport:
    """Bytes per device as llama-server reports them while loading, keyed like the plan (RPC0.., CUDA0.., CPU)."""

    weights: dict[str, int] = field(default_factory=dict)
    kv: dict[str, int] = field(default_factory=dict)
    compute: dict[str, int] = field(default_factory=dict)
    offloaded: tuple[int, int] | None = None
    log: str = ""


def parse_load_report(text: str, c: Cluster, tier: RpcTier) -> LoadReport:
    """Read llama-server's buffer-size lines (-lv 4); RPC buffers are matched to devices by endpoint."""
    by_endpoint = {}
    for d in topo.tier_devices(c, tier) if tier.workers else []:  # a tier on one node: its devices by name
        if d.endpoint:
            by_endpoint.setdefault(d.endpoint, []).append(d.name)
    report = LoadReport(log=text)
    seen: dict[tuple[str, str], int] = {}
    for phase, device, endpoint, mib in BUFFER.findall(text):
        if endpoint:
            names = by_endpoint.get(endpoint, [endpoint])
            key = (phase, endpoint)
            name = names[min(seen.get(key, 0), len(names) - 1)]
            seen[key] = seen.get(key, 0) + 1
        elif device.startswith("CPU"):
            name = "CPU"
        else:
            name = device
        target = {"load_tensors": report.weights, "llama_kv_cache": report.kv, "sched_reserve": report.compute}[phase]
        target[name] = target.get(name, 0) + round(float(mib) * MIB)
    match = OFFLOADED.search(text)
    report.offloaded = (int(match.group(1)), int(match.group(2))) if match else None
    return report


def load_report(transport, c: Cluster, tier: RpcTier, port: int = 18999, seconds: int = 60) -> LoadReport:
    """Stop the head, load the model once more with the unit's own command line plus -lv 4, restart the head.

    Disruptive: the tier does not answer while this runs (the RPC workers serve one client at a time).
    """
    unit = topo.units(tier).head
    argv = server_argv(c, tier)
    argv[argv.index("--port") + 1] = str(port)
    text = _loaded_buffers(transport, c, tier.head, argv, seconds, before=f"systemctl stop {unit}",
                           after=f"systemctl start {unit}")
    return parse_load_report(text, c, tier)


def slurm_load_report(transport, c: Cluster, tier: RpcTier, seconds: int = 300) -> LoadReport:
    """Submit the tier's own batch script once more with llama.cpp's LLAMA_ARG_LOG_VERBOSITY=4 in the job's
    environment (its steps inherit it), wait until that job registers its endpoint, read the head step's log,
    and cancel the job. Disruptive: the caller stops the tier first (so the keeper leaves it) and deploys it after.
    """

    ctl, job = c.slurm_controller, topo.units(tier).job
    record = posixpath.join(c.storage.endpoint_dir, f"{tier.name}.json")
    submit = transport.run(ctl, slurmjob.jobs(c, tier, "submit", "--export=ALL,LLAMA_ARG_LOG_VERBOSITY=4"))
    if not submit.ok:
        raise RuntimeError(f"{ctl}: sbatch of {job} for its load report failed: {submit.tail()}")
    job_id = submit.stdout.strip().split(";")[0]
    try:
        waited = transport.run(ctl, f"for _ in $(seq {seconds}); do grep -q '\"job_id\": \"{job_id}\"' {record} "
                                    f"2>/dev/null && exit 0; sleep 1; done; exit 1", timeout=seconds + 30)
        log = posixpath.join(c.storage.log_dir, f"{job}-{job_id}-head.log")
        text = transport.run(ctl, f"cat {log}").stdout
        if not waited.ok:
            raise RuntimeError(f"job {job_id} ({job}) did not register its endpoint within {seconds} s; "
                               f"the end of {log}:\n{text[-1500:]}")
    finally:
        transport.run(ctl, slurmjob.jobs(c, tier, "cancel", "--wait", "60", job_id))
    return parse_load_report(text, c, tier)


def model_load_report(transport, c: Cluster, tier: RouterTier, model_id: str, port: int = 18998,
                      seconds: int = 60) -> LoadReport:
    """What one model of a router-mode tier takes when it loads: llama-server started by hand on the tier's node
    with the model and the router's own flags (what its children inherit), -lv 4, then stopped. Not disruptive."""
    argv = server_argv(c, tier)
    for flag in ("--models-preset", "--models-max", "--api-key-file"):
        if flag in argv:
            i = argv.index(flag)
            del argv[i:i + 2]
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[1:1] = ["--model", f"{c.storage.models_dir}/{c.model(model_id).file}"]
    text = _loaded_buffers(transport, c, tier.node, argv, seconds)
    report = LoadReport(log=text)
    for phase, device, _endpoint, mib in BUFFER.findall(text):
        target = {"load_tensors": report.weights, "llama_kv_cache": report.kv, "sched_reserve": report.compute}[phase]
        name = "CPU" if device.startswith("CPU") else device
        target[name] = target.get(name, 0) + round(float(mib) * MIB)
    return report


def _loaded_buffers(transport, c: Cluster, node: str, argv: list[str], seconds: int, before: str = "true",
                    after: str = "true") -> str:
    """Run a server command line with -lv 4 until it listens, stop it, and return its buffer-size lines."""
    argv = [*argv, "--log-verbosity", "4"]
    log = "/tmp/clusterbook-load-report.log"
    # the last run's log goes first: the loop below may read the file before the background server's redirection
    # empties it, and a previous report's 'listening on' ended the wait at once (two reports came out the same)
    command = (f"{before}; rm -f {log}; LD_LIBRARY_PATH={ld_library_path(c)} "
               f"{' '.join(shlex.quote(a) for a in argv)} > {log} 2>&1 & pid=$!; "
               f"for i in $(seq {seconds * 10}); do grep -q 'listening on' {log} && break; "
               "kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill $pid 2>/dev/null; wait $pid; "
               f"sed -n '/buffer size/p; /offloaded/p' {log}; {after}")
    return transport.run(node, command, timeout=seconds + 60).stdout


@dataclass(frozen=True)
class ChatTiming:
    """One chat completion, measured: wall-clock time to first token and llama.cpp's own decode speed."""

    ttft_s: float
    decode_tps: float
    prompt_tps: float
    completion_tokens: int
    prompt_tokens: int = 0  # what the server read of the prompt (llama.cpp's timings: none it had cached)


FIXED_PROMPT = "Write a short Rust function that returns the sum of a slice of integers."


def chat(url: str, model: str, api_key: str | None = None, max_tokens: int = 32, timeout: float = 300,
         prompt: str = FIXED_PROMPT, extra: dict | None = None) -> dict:
    """One non-streamed chat completion (fixed seed, greedy, ignore_eos); the response as JSON."""
    import httpx  # lazy, here and below: httpx (0.2 s) only for tasks that ask a tier over HTTP, not deploy's

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=timeout, json={
        "model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
        "ignore_eos": True, "seed": 42, "temperature": 0, **(extra or {})})
    response.raise_for_status()
    return response.json()


def ask(url: str, tier, api_key: str | None = None, max_tokens: int = 4, timeout: float = 300,
        model: str | None = None) -> dict:
    """The tier's kind's one request to a model of it (its first unless named), the answer as JSON: a chat tier a
    completion of max_tokens (as chat() sends it), another its kind's request (an embedding of one short input)."""
    import httpx

    model = model or tier.served_models[0]
    if tier.api == "chat":
        return chat(url, model, api_key, max_tokens, timeout)
    path, body = kinds.of(tier).request(model)
    response = httpx.post(url + path, headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                          timeout=timeout, json=body)
    response.raise_for_status()
    return response.json()


def timed_chat(url: str, model: str, api_key: str | None = None, max_tokens: int = 64,
               prompt: str = FIXED_PROMPT) -> ChatTiming:
    """Stream a completion: TTFT is the first token chunk on the wire; decode speed is llama.cpp's timings."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "ignore_eos": True, "seed": 42, "temperature": 0, "stream": True}
    started = time.monotonic()
    first = None
    timings: dict = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", headers=headers, json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = _json.loads(line[6:])
            delta = (chunk.get("choices") or [{}])[0].get("delta", {})
            # a token chunk carries content (possibly "" while a multi-byte character is incomplete)
            if first is None and ("content" in delta or "reasoning_content" in delta):
                first = time.monotonic() - started
            timings = chunk.get("timings", timings)
    if first is None:  # no token chunk seen: fall back to llama.cpp's own prompt time
        first = timings.get("prompt_ms", 0.0) / 1000
    return ChatTiming(first, timings.get("predicted_per_second", 0.0), timings.get("prompt_per_second", 0.0),
                      timings.get("predicted_n", 0), timings.get("prompt_n", 0))


def listening(transport, node: str, port: int) -> list[str]:
    """Local addresses a node listens on for a TCP port."""
    out = transport.run(node, f"ss -Hltn 'sport = :{port}'").stdout
    return sorted({line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()})


def connected(transport, node: str, address: str, port: int) -> bool:
    """Whether a node holds an established TCP connection to address:port."""
    out = transport.run(node, f"ss -Htn state established '( dst {address} and dport = :{port} )'").stdout
    return bool(out.strip())


def can_connect(transport, node: str, address: str, port: int, timeout: int = 3) -> bool:
    """Whether a TCP connection from a node to address:port succeeds (a refused or dropped one does not)."""
    command = f"timeout {timeout} bash -c 'echo > /dev/tcp/{address}/{port}' 2>/dev/null && echo open || echo closed"
    return transport.run(node, command, timeout=timeout + 30).stdout.strip() == "open"


def api_key(transport, c: Cluster, tier) -> str | None:
    """The tier's API key: read from its file on the node, or from this machine's environment."""

    if not tier.api_key:
        return None
    if tier.api_key.env:
        return os.environ.get(tier.api_key.env)
    return transport.run(tier.nodes[0], f"cat {shlex.quote(tier.api_key.file)}").stdout.strip() or None


def registered_endpoint(transport, c: Cluster, tier) -> dict | None:
    """A SLURM tier's endpoint record on the controller (host, port, job_id, nodes), or None while none is there or
    it names no node of the tier and port (a record is anyone's who can write the shared folder, and a client asks,
    with the tier's key, where it points)."""
    out = transport.run(c.slurm_controller, f"cat {c.storage.endpoint_dir}/{tier.name}.json 2>/dev/null")
    try:
        record = json.loads(out.stdout) if out.ok and out.stdout.strip() else None
    except ValueError:
        return None
    port = record.get("port") if isinstance(record, dict) else None
    if type(port) is not int or not 0 < port < 65536 or str(record.get("host")) not in topo.tier_hosts(c, tier):
        return None
    return record


def prometheus_alerts(transport, c: Cluster) -> list[dict]:
    """The alerts Prometheus has now (firing and pending), each with its labels, annotations, state and activeAt,
    asked on the monitoring node itself."""
    out = transport.run(c.monitoring.node, f"curl -sf -m 10 http://localhost:{c.monitoring.port}/api/v1/alerts",
                        timeout=30)
    if not out.ok:
        raise RuntimeError(f"{c.monitoring.node}: Prometheus did not list its alerts (exit {out.returncode}): "
                           f"{out.tail()}")
    return json.loads(out.stdout)["data"]["alerts"]


def prometheus_query(transport, c: Cluster, promql: str) -> list[dict]:
    """An instant PromQL query, asked on the monitoring node itself (its port need not be reachable from here):
    the result's series, each {"metric": labels, "value": [time, "text"]}."""

    command = (f"curl -sfG http://localhost:{c.monitoring.port}/api/v1/query "
               f"--data-urlencode {shlex.quote('query=' + promql)}")
    out = transport.run(c.monitoring.node, command, timeout=30)
    if not out.ok:
        raise RuntimeError(f"{c.monitoring.node}: Prometheus did not answer `{promql}` (exit {out.returncode}): "
                           f"{out.tail()}")
    return json.loads(out.stdout)["data"]["result"]
