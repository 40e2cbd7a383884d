"""Facts derived from the cluster file: devices in llama.cpp order, endpoints, units, SSH routes, host selectors."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, Gpu, Node, RpcTier, Tier
from clusterbook.pure.layersplit import CPU, Placement, cpu_head_ngl, place_layers

FULL_OFFLOAD = 999


@dataclass(frozen=True)
class Device:
    """One device a tier computes on, named as llama.cpp names it (RPC0.., CUDA0.., CPU)."""

    name: str
    node: str
    gpu: Gpu | None
    share: float
    endpoint: str | None = None  # host:port for RPC devices

    @property
    def memory_bytes(self) -> int | None:
        return self.gpu.memory_mib * 2**20 if self.gpu else None


def address(c: Cluster, node: str, network: str | None = None) -> str:
    """A node's address on a network (default: management)."""
    return c.node(node).addresses[network or c.management_network]


def http_address(c: Cluster, tier: Tier) -> str:
    """Address the tier's HTTP API binds to and is reached at."""
    return address(c, tier.nodes[0], listen_network(c, tier))


def listen_network(c: Cluster, tier: Tier) -> str:
    return tier.listen_network or c.management_network


def tier_hosts(c: Cluster, tier) -> list[str]:
    """The names and addresses (the tier's listen network's, as its job registers them) of the nodes a tier may run
    on: where its endpoint record may point."""
    nodes = candidate_nodes(c, tier)
    return sorted(set(nodes) | {address(c, n, listen_network(c, tier)) for n in nodes})


def endpoint_url(c: Cluster, tier: Tier) -> str:
    """Direct URL of a tier's API (not through the gateway)."""
    return f"http://{http_address(c, tier)}:{tier.port}"


def gateway_url(c: Cluster, tier_name: str) -> str | None:
    """URL of a tier through the gateway's Tailscale name, if published."""
    if not c.gateway or not c.gateway.url:
        return None
    for route in c.gateway.routes:
        if route.tier == tier_name:
            return c.gateway.url + route.path.rstrip("/")
    return None


def client_url(c: Cluster, tier: Tier) -> str:
    """Where clients should ask a tier: the gateway's Tailscale name, else the gateway's port for the tier, else the
    tier's own endpoint (for a SLURM tier, where its job runs when the cluster file pins it)."""
    published = gateway_url(c, tier.name)
    if published:
        return published
    for route in (c.gateway.routes if c.gateway else []):
        if route.tier == tier.name:
            return f"http://{c.gateway.listen[0]}:{route.port}"
    return endpoint_url(c, tier)


def site_status_url(c: Cluster) -> str | None:
    """Where the published site's status banner reads the alerts firing now: the monitoring node's alert receiver,
    on loopback, so only where the site is published on that node (else the banner says it has no status)."""
    gw, m = c.gateway, c.monitoring
    if gw and gw.docs_port and m and m.node == gw.node:
        return f"http://127.0.0.1:{m.alert_journal_port}/alerts"
    return None


def rpc_endpoints(c: Cluster, tier: RpcTier) -> list[str]:
    """host:port of each worker on the RPC network, in --rpc order."""
    return [f"{address(c, w, c.rpc_network)}:{tier.rpc_port}" for w in tier.workers]


def _shares(tier: RpcTier, node: Node) -> list[float]:
    share = tier.tensor_split[node.name]
    return [float(s) for s in (share if isinstance(share, list) else [share])]


def tier_devices(c: Cluster, tier: RpcTier) -> list[Device]:
    """Devices in llama.cpp's order: every worker's devices (RPC first, in --rpc order), then the head's GPUs.

    A CPU-only head contributes a CPU device, which is not part of --tensor-split (see head_cpu_blocks).
    """
    devices: list[Device] = []
    for w, endpoint in zip(tier.workers, rpc_endpoints(c, tier)):
        node = c.node(w)
        gpus: list[Gpu | None] = list(node.gpu_devices) or [None]
        for gpu, share in zip(gpus, _shares(tier, node)):
            devices.append(Device(f"RPC{len(devices)}", w, gpu, share, endpoint))
    head = c.node(tier.head)
    if head.gpu_devices:
        for i, (gpu, share) in enumerate(zip(head.gpu_devices, _shares(tier, head))):
            devices.append(Device(f"CUDA{i}", head.name, gpu, share))
    else:
        devices.append(Device("CPU", head.name, None, _shares(tier, head)[0]))
    return devices


def offload_devices(c: Cluster, tier: RpcTier) -> list[Device]:
    """The devices llama.cpp offloads to (the --tensor-split entries): all but a CPU head."""
    return [d for d in tier_devices(c, tier) if d.name != "CPU"]


def head_cpu_blocks(c: Cluster, tier: RpcTier) -> int:
    """Blocks kept on a CPU-only head: its share of the layers (0 when the head has GPUs)."""
    devices = tier_devices(c, tier)
    cpu = [d for d in devices if d.name == "CPU"]
    if not cpu:
        return 0
    layers = c.model(tier.model).architecture.layers
    return round(layers * cpu[0].share / sum(d.share for d in devices))


def n_gpu_layers(c: Cluster, tier: RpcTier) -> int:
    """-ngl: full offload, or fewer when a CPU-only head keeps its share of blocks."""
    blocks = head_cpu_blocks(c, tier)
    if not blocks:
        return FULL_OFFLOAD
    return cpu_head_ngl(c.model(tier.model).architecture.layers, blocks, c.engine.build)


def placement(c: Cluster, tier: RpcTier) -> Placement:
    """Device index (into offload_devices; CPU = -1) of every block and of the output layer."""
    layers = c.model(tier.model).architecture.layers
    shares = [d.share for d in offload_devices(c, tier)]
    return place_layers(layers, n_gpu_layers(c, tier), shares, c.engine.build)


def layers_per_device(c: Cluster, tier: RpcTier) -> list[tuple[Device, int, bool]]:
    """(device, blocks, holds the output layer) for every device of the tier, in device order."""
    place = placement(c, tier)
    result = []
    offload = offload_devices(c, tier)
    for dev in tier_devices(c, tier):
        idx = CPU if dev.name == "CPU" else offload.index(dev)
        result.append((dev, place.blocks_on(idx), place.output == idx))
    return result


def tensor_split_flag(c: Cluster, tier: RpcTier) -> str:
    """--tensor-split value in device order."""
    return ",".join(f"{d.share:g}" for d in offload_devices(c, tier))


@dataclass(frozen=True)
class Units:
    """systemd unit and SLURM job names of a tier."""

    head: str
    worker: str | None
    job: str
    firewall: str | None  # loads the RPC port's rules at boot, on every worker


def units(tier: Tier) -> Units:
    rpc = bool(tier.workers)
    return Units(head=f"llama-{tier.name}", worker=f"llama-rpc-{tier.name}" if rpc else None,
                 job=f"llama-{tier.name}", firewall=f"llama-rpc-{tier.name}-firewall" if rpc else None)


PEOPLE_SAFE = re.compile(r"[^$`\"\\!]*")  # what a shell leaves alone inside double quotes


def quoted_for_people(remote: str) -> str:
    """One shell word for a command a person reads: in double quotes where the shell would change nothing inside
    them (no $, backtick, double quote, backslash or !), else single-quoted as shlex does ('"'"' for a quote)."""
    if "'" in remote and PEOPLE_SAFE.fullmatch(remote):
        return f'"{remote}"'
    return shlex.quote(remote)


@dataclass(frozen=True)
class SshRoute:
    """How to reach a node: user@host plus the ProxyJump chain, nearest hop last; `alias` is the node's Host entry in
    the ssh_config clusterbook writes (`invoke ssh-config`)."""

    user: str
    host: str
    jumps: tuple[str, ...]
    connect_timeout: int = 10  # access.connect_timeout: a node that does not answer is reported, not waited for
    alias: str = ""

    def short(self, remote: str) -> str:
        """The command by the node's alias, as the docs show it: the remote command starts a few characters in
        (readable on a phone); the alias carries the user, the jumps and the connect timeout."""
        return f"ssh {self.alias} {quoted_for_people(remote)}"

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}"

    def command(self, remote: str | None = None) -> str:
        """A copy-pasteable ssh command line."""
        parts = ["ssh", "-o", f"ConnectTimeout={self.connect_timeout}"]
        if self.jumps:
            parts += ["-J", ",".join(self.jumps)]
        parts.append(self.target)
        if remote:
            parts.append(shlex.quote(remote))
        return " ".join(parts)


def ssh_route(c: Cluster, node_name: str) -> SshRoute:
    node = c.node(node_name)
    host = node.ssh_host or node.addresses[c.management_network]
    chain: list[str] = []
    jump = node.jump
    while jump:
        j = c.access.jump_hosts[jump]
        port = f":{j.port}" if j.port != 22 else ""
        chain.insert(0, f"{j.user or c.access.user}@{j.address}{port}")
        jump = j.via
    return SshRoute(c.access.user, host, tuple(chain), c.access.connect_timeout, node.name)
