"""The lab's bridges: one per network of the lab cluster file, named after its subnet (two lab files on other subnets
never share one), with the host at the subnet's first address."""

from __future__ import annotations

import ipaddress
import subprocess

from clusterbook.model.schema import Cluster


def bridge_name(c: Cluster, network: str) -> str:
    """cb-213-0 for 10.213.0.0/24: the subnet's second and third numbers."""
    octets = str(ipaddress.ip_network(c.networks[network].subnet).network_address).split(".")
    return f"cb-{octets[1]}-{octets[2]}"


def host_address(c: Cluster, network: str) -> str:
    """The host's address on a lab network: the subnet's first host address."""
    return str(next(ipaddress.ip_network(c.networks[network].subnet).hosts()))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def ensure_bridges(c: Cluster) -> None:
    for name, net in c.networks.items():
        bridge = bridge_name(c, name)
        if not link_exists(bridge):
            _ip("link", "add", bridge, "type", "bridge")
        prefix = ipaddress.ip_network(net.subnet).prefixlen
        address = f"{host_address(c, name)}/{prefix}"
        if address not in _ip("-o", "addr", "show", "dev", bridge).stdout:
            _ip("addr", "add", address, "dev", bridge)
        _ip("link", "set", bridge, "mtu", str(min(net.mtu, 1500)), "up")


def attach(c: Cluster, interface: str, network: str) -> None:
    """Put a host-side veth of a container on a network's bridge."""
    _ip("link", "set", interface, "master", bridge_name(c, network), "up")


def remove_bridges(c: Cluster) -> list[str]:
    removed = []
    for name in c.networks:
        bridge = bridge_name(c, name)
        if link_exists(bridge):
            _ip("link", "delete", bridge)
            removed.append(bridge)
    return removed


def leftover_links(c: Cluster, nodes: list[str]) -> list[str]:
    """Bridges or veths of this lab still present (after lab.down there must be none)."""
    names = [bridge_name(c, n) for n in c.networks] + [veth_name(n, net) for n in nodes for net in c.networks]
    return [n for n in names if link_exists(n)]


def veth_name(node: str, network: str) -> str:
    """Host-side veth of a node on a network (nspawn names the first one vb-<machine> itself)."""
    return f"v{network[:3]}-{node}"[:15]
