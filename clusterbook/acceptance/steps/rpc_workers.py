"""Steps of rpc_workers.feature: the RPC workers run, bind and are firewalled as the file says."""

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from pytest_bdd import then

from clusterbook.acceptance.steps.helpers import rpc_tiers
from clusterbook.effects import probes
from clusterbook.pure import layout
from clusterbook.pure import topology as topo


@then("every RPC worker runs on its node: its unit active and enabled, or its step in the tier's running job")
def _workers_active(cluster, transport, measured, tiers):
    if not rpc_tiers(cluster, among=tiers):
        pytest.skip("no RPC tier among the tiers under test")
    binary = cluster.engine.rpc_worker_binary
    for tier in rpc_tiers(cluster, among=tiers):
        if tier.manager == "systemd":
            unit = topo.units(tier).worker
            for worker in tier.workers:
                command = f"systemctl is-active {unit}; systemctl is-enabled {unit}"
                states = transport.run(worker, command).stdout.split()
                assert states == ["active", "enabled"], \
                    f"{unit} on {worker}: expected active and enabled, found {' and '.join(states) or 'no answer'}"
            continue
        for worker in tier.workers:  # the worker's parent is SLURM's step daemon: it runs as a step of the job
            found = transport.run(worker, f"pid=$(pgrep -o -f '[{binary[0]}]{binary[1:]} .*--port {tier.rpc_port}') && "
                                          "ps -o comm= -p $(ps -o ppid= -p $pid | tr -d ' ')").stdout.strip()
            assert found == "slurmstepd", \
                f"{worker}: expected {binary} of tier {tier.name} as a step of job {topo.units(tier).job} (parent " \
                f"slurmstepd), found {'parent ' + found if found else 'no such process'}"
        measured(f"{tier.name} workers", f"steps of job {topo.units(tier).job} on {', '.join(tier.workers)}")


@then("every RPC worker listens on its RPC network address and on no other address")
def _workers_bind(cluster, transport, tiers):
    for tier in rpc_tiers(cluster, among=tiers):
        for worker in tier.workers:
            expected = [topo.address(cluster, worker, cluster.rpc_network)]
            found = probes.listening(transport, worker, tier.rpc_port)
            assert found == expected, f"{worker}:{tier.rpc_port}: expected to listen on {expected}, found {found}"


@then("from each tier head, the RPC port of every worker is closed on the worker's other addresses")
def _rpc_closed_elsewhere(cluster, transport):
    probes_to_run = [(tier, worker, network, address) for tier in rpc_tiers(cluster) for worker in tier.workers
                     for network, address in cluster.node(worker).addresses.items() if network != cluster.rpc_network]
    if not probes_to_run:
        pytest.skip("no worker has an address besides its RPC network address")
    # side by side: a dropped connection waits out its whole timeout
    with ThreadPoolExecutor(len(probes_to_run)) as pool:
        opened = list(pool.map(lambda p: probes.can_connect(transport, p[0].head, p[3], p[0].rpc_port), probes_to_run))
    for (tier, worker, network, address), reached in zip(probes_to_run, opened, strict=True):
        assert not reached, \
            f"{worker}: expected port {tier.rpc_port} closed on {address} ({network}), it accepted a connection"


@then("every worker's firewall table is loaded and drops the RPC port for addresses outside the tier")
def _rpc_firewall(cluster, transport):

    def reaches(address: str, port: int) -> bool:
        try:  # this machine is not one of the tier's nodes: the rule must drop it
            socket.create_connection((address, port), timeout=3).close()
            return True
        except OSError:
            return False

    pairs = [(tier, worker) for tier in rpc_tiers(cluster) for worker in tier.workers]
    for tier, worker in pairs:  # the firewall the node has: nftables (Debian), firewalld's rich rules (EL)
        if cluster.node(worker).os.family == "el":
            script = layout.tier_paths(cluster, tier)["firewalld_script"]
            listed = transport.run(worker, f"{script} --check")
            assert listed.ok, f"{worker}: expected firewalld rich rules of {script} in place, {listed.tail()}"
            continue
        table = "clusterbook_" + tier.name.replace("-", "_")
        listed = transport.run(worker, f"nft list table inet {table}")
        assert listed.ok, f"{worker}: expected nftables table {table} ({tier.manager} tier), {listed.tail()}"
    with ThreadPoolExecutor(max(1, len(pairs))) as pool:  # side by side: each dropped connection waits 3 s
        reached = list(pool.map(lambda p: reaches(cluster.node(p[1]).addresses[cluster.rpc_network], p[0].rpc_port),
                                pairs))
    for (tier, worker), open_ in zip(pairs, reached, strict=True):
        address = cluster.node(worker).addresses[cluster.rpc_network]
        assert not open_, f"{worker}: port {tier.rpc_port} on {address} accepted a connection from outside the tier"

