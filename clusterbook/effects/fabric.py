"""The fabric's bandwidth, measured: TCP with iperf3 from an RPC tier's head to each of its workers, over the RPC
network's addresses (the path llama.cpp's RPC traffic takes)."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass

from clusterbook.model.schema import Cluster, RpcTier
from clusterbook.pure import topology as topo
from clusterbook.pure.packages import install_command

IPERF_PORT = 5201


@dataclass(frozen=True)
class FabricLink:
    """One head -> worker measurement."""

    tier: str
    head: str
    worker: str
    source: str  # the head's address on the RPC network
    target: str  # the worker's
    gbps: float  # received, Gbit/s
    retransmits: int
    seconds: float

    def to_json(self) -> dict:
        return vars(self)


def measure_link(c: Cluster, transport, tier: RpcTier, worker: str, seconds: int = 5) -> FabricLink:
    """iperf3 server on the worker (one test, then it exits), client on the head, both bound to the RPC network."""
    network = c.rpc_network
    source, target = topo.address(c, tier.head, network), topo.address(c, worker, network)
    for node in (tier.head, worker):
        if not transport.run(node, "command -v iperf3").ok:
            installed = transport.run(node, install_command(c.node(node).os, "iperf3"), timeout=600)
            if not installed.ok:
                raise RuntimeError(f"{node}: iperf3 is not installed, and installing it failed: {installed.tail()}")
    # where firewalld guards the worker (EL), the test's port is opened to the head alone, until this run ends
    rule = (f"rule family=ipv4 source address={source} destination address={target} port port={IPERF_PORT} "
            "protocol=tcp accept")
    firewalld = transport.run(worker, "firewall-cmd --state").ok
    # in the zone of the fabric interface (the rendered firewalld scripts find it the same way), not the default zone
    iface = f"$(ip -o addr show to {target} | awk '{{print $2}}' | head -n 1)"
    zone = f'--zone="$(firewall-cmd --get-zone-of-interface={iface} 2>/dev/null || firewall-cmd --get-default-zone)"'
    if firewalld:
        opened = transport.run(worker, f"firewall-cmd {zone} --add-rich-rule={shlex.quote(rule)}")
        if not opened.ok:
            raise RuntimeError(f"{worker}: firewall-cmd could not open port {IPERF_PORT} to {source}: {opened.tail()}")
    try:
        return _measure(c, transport, tier, worker, source, target, seconds)
    finally:
        if firewalld:
            transport.run(worker, f"firewall-cmd {zone} --remove-rich-rule={shlex.quote(rule)}")


def _measure(c: Cluster, transport, tier: RpcTier, worker: str, source: str, target: str, seconds: int) -> FabricLink:
    started = transport.run(worker, f"iperf3 -s -1 -D -B {target} -p {IPERF_PORT}")
    if not started.ok:
        raise RuntimeError(f"{worker}: iperf3 -s did not start: {started.tail()}")
    for _ in range(20):  # the daemon binds in the background
        if transport.run(worker, f"ss -Hltn 'sport = :{IPERF_PORT}' | grep -q LISTEN").ok:
            break
        time.sleep(0.25)
    try:
        out = transport.run(tier.head, f"iperf3 -c {target} -B {source} -p {IPERF_PORT} -t {seconds} -J "
                                       "--connect-timeout 5000", timeout=seconds + 60)
    finally:  # a server nobody reached would hold the port for the next run
        transport.run(worker, f"pkill -f '[i]perf3 -s -1 -D -B {target} ' || true")
    try:
        result = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"{tier.head} -> {worker} ({source} -> {target}): iperf3 -c exited {out.returncode}: "
                           f"{out.stdout[-300:] or out.tail()}") from None
    if "error" in result:
        raise RuntimeError(f"{tier.head} -> {worker} ({source} -> {target}): iperf3: {result['error']} (is "
                           f"{worker}'s {c.rpc_network} interface up?)")
    end = result["end"]
    return FabricLink(tier.name, tier.head, worker, source, target,
                      round(end["sum_received"]["bits_per_second"] / 1e9, 2),
                      int(end["sum_sent"].get("retransmits", 0)), float(seconds))


def measure(c: Cluster, transport, tier: RpcTier, seconds: int = 5) -> list[FabricLink]:
    """Each worker in turn (one at a time: links that share the head's port would share its bandwidth)."""
    return [measure_link(c, transport, tier, worker, seconds) for worker in tier.workers]
