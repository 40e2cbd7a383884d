"""Probes of a live tier: llama.cpp's own load report (buffers per device), HTTP health, and chat timings."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .. import topology as topo
from ..flags import server_argv
from ..render.artifacts import ld_library_path
from ..schema import Cluster, RpcTier

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
    for d in topo.tier_devices(c, tier):
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
    argv = server_argv(c, tier) + ["--log-verbosity", "4"]
    argv[argv.index("--port") + 1] = str(port)
    log = "/tmp/clusterbook-load-report.log"
    command = (f"systemctl stop {unit}; LD_LIBRARY_PATH={ld_library_path(c)} "
               f"{' '.join(shlex.quote(a) for a in argv)} > {log} 2>&1 & pid=$!; "
               f"for i in $(seq {seconds * 10}); do grep -q 'listening on' {log} && break; "
               "kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill $pid 2>/dev/null; wait $pid; "
               f"sed -n '/buffer size/p; /offloaded/p' {log}; systemctl start {unit}")
    result = transport.run(tier.head, command, timeout=seconds + 60)
    return parse_load_report(result.stdout, c, tier)
