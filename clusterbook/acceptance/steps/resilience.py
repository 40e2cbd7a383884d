"""Steps of resilience.feature (systemd tiers): a node restart and a killed worker come back."""

import time

import pytest
from pytest_bdd import then, when

from clusterbook.acceptance.steps.helpers import (
    alert_window,
    answers_through_gateway,
    is_lab,
    recovery_target,
    rpc_tiers,
    systemd_rpc_tier,
    until_answers,
)
from clusterbook.effects import probes
from clusterbook.effects.lab.lab import Lab
from clusterbook.effects.recovery import disrupt
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.loadtime import predict_load


@when("the last worker node of the first RPC tier restarts")
def _restart_node(cluster, cluster_file, transport, context, measured):

    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    tier = rpc_tiers(cluster)[0]  # either manager: a SLURM job loses its worker step and is requeued
    node = tier.workers[-1]
    context.update(tier=tier, node=node)
    if is_lab(cluster_file):
        power_off, boot = Lab(cluster).restart(node)  # from the folder verify runs in, as every task
    else:
        started = time.monotonic()
        transport.run(node, "systemctl reboot", timeout=20)
        transport.close(node)
        while time.monotonic() - started < 600 and transport.run(node, "true", timeout=20).ok:
            time.sleep(1)  # still up: the reboot has not taken it down yet
        power_off = time.monotonic() - started
        while time.monotonic() - started < 600 and not transport.run(node, "true", timeout=20).ok:
            time.sleep(5)
        boot = time.monotonic() - started - power_off
    measured(f"{node} power-off s", round(power_off, 1))
    measured(f"{node} boot s", round(boot, 1))
    # the recovery target measures the tier's recovery, from the node's return, not the machine's shutdown
    context["started"] = time.monotonic()


@then("every service of that node is active again")
def _services_back(cluster, transport, context):
    node = context["node"]
    units = [topo.units(t).head for t in cluster.tiers if t.nodes[0] == node and t.manager == "systemd"]
    units += [topo.units(t).worker for t in rpc_tiers(cluster, "systemd") if node in t.workers]
    units += [topo.units(t).firewall for t in rpc_tiers(cluster) if node in t.workers]  # the rules, after boot
    if any(t.manager == "slurm" for t in cluster.tiers) and cluster.slurm and \
            any(node in p.nodes for p in cluster.slurm.partitions):
        units.append("slurmd")
    deadline = time.monotonic() + 60
    states = []
    while time.monotonic() < deadline:
        states = transport.run(node, "systemctl is-active " + " ".join(units)).stdout.split()
        if states and all(s == "active" for s in states):
            return
        time.sleep(1)
    pytest.fail(f"{node}: expected {', '.join(units)} active after the restart, found {states}")


@when("an RPC worker of the first RPC tier is killed with SIGKILL")
def _kill_worker(cluster, transport, context):

    tier = systemd_rpc_tier(cluster)
    disrupt(cluster, transport, tier, "worker killed")  # what bench.recovery does; fails naming node and command
    context.update(tier=tier, node=tier.workers[0], started=time.monotonic())


@when("then its head is killed with SIGKILL")
def _kill_head(cluster, transport, context):
    disrupt(cluster, transport, context["tier"], "head killed")  # its workers stay: they keep its weights (P4)
    context.update(started=time.monotonic(), head=True)


@then("the tier answers a chat completion again within the recovery target")
@then("the tier answers a chat completion again within the recovery target, or before its down alert fires where "
      "SLURM requeues its job")
def _recovers(cluster, transport, context, measured):
    tier, head = context["tier"], context.get("head", False)
    predicted = predict_load(cluster, tier, plan_tier(cluster, tier))
    what = " after its head's crash" if head else ""
    measured(f"{tier.name} predicted recovery s{what} (planner)",
             round(predicted.head_recovery_s if head else predicted.recovery_s, 1))
    if tier.manager == "slurm":  # the node's steps are gone with it: the job is requeued; ask where clients ask
        measured(f"{tier.name} predicted by {predicted.new_job_kind} s (planner)",
                 round(predicted.new_job_recovery_s, 1))
        measured(f"{tier.name} recovery s (through the gateway)",
                 answers_through_gateway(cluster, transport, tier, context["started"], "of the node's return",
                                         alert_window(cluster, tier)))
        return
    limit = recovery_target(cluster, tier)
    until_answers(cluster, transport, tier, max(limit * 3, 60))
    total = time.monotonic() - context["started"]
    measured(f"{tier.name} recovery s{what}", round(total, 1))
    assert total <= limit, f"tier {tier.name}: expected to answer within {limit:g} s, took {total:.1f} s"
    for endpoint in topo.rpc_endpoints(cluster, tier):  # and runs on every worker again
        address, port = endpoint.split(":")
        assert probes.connected(transport, tier.head, address, int(port)), \
            f"tier {tier.name}: answers again, but without the worker at {endpoint}"

