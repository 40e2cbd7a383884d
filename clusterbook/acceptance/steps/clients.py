"""Steps that keep clients busy through the gateway while a scenario's fault happens, and check that none of their
requests failed (issue 46: a fault costs clients nothing within the planned recovery)."""

import time

import pytest
from pytest_bdd import given, then

from clusterbook.effects import probes
from clusterbook.effects.faults import Clients
from clusterbook.pure import layout
from clusterbook.pure import topology as topo

CLIENTS_PER_TIER = 2  # one streaming, one not: few enough that the scenario's own checks are not queued behind them
STREAM_TOKENS = 64


@given("clients send chat completions through the gateway to every tier behind it")
def _clients(cluster, transport, context, request):
    routed = [cluster.tier(r.tier) for r in cluster.gateway.routes] if cluster.gateway else []
    start_clients(cluster, transport, context, request, [t for t in routed if t.api == "chat"])  # chat clients


@given("clients send chat completions through the gateway to the first single-node SLURM tier")
def _clients_of_the_moved_tier(cluster, transport, context, request):
    """The tier a preemption moves to another node (a tier over every node waits for the node, past its hold)."""
    tiers = [t for t in cluster.tiers if t.manager == "slurm" and not t.workers and t.api == "chat"]
    routed = {r.tier for r in cluster.gateway.routes} if cluster.gateway else set()
    start_clients(cluster, transport, context, request, [t for t in tiers[:1] if t.name in routed])


def start_clients(cluster, transport, context, request, tiers) -> None:
    if not tiers:
        pytest.skip("no such tier behind a gateway in this cluster file")
    pools = {}
    for tier in tiers:
        url = topo.client_url(cluster, tier) + "/v1/chat/completions"
        pools[tier.name] = Clients(url, probes.api_key(transport, cluster, tier), CLIENTS_PER_TIER,
                                   tier.timeout_s + 60, tier.served_models[0], STREAM_TOKENS).start()
    context.update(clients=pools, clients_since=int(time.time()) - 5)  # the gateway's clock may be a little behind
    request.addfinalizer(lambda: [pool.stop(0) for pool in pools.values()])  # also when a step before the end fails


@then("no client request failed meanwhile")
def _none_failed(cluster, transport, context, measured):
    failed = []
    for name, pool in context["clients"].items():
        requests = pool.stop(cluster.tier(name).timeout_s + 60)
        measured(f"client requests through the gateway ({name})", len(requests))
        failed += [(name, r) for r in requests if r.outcome != "ok"]
    if failed:
        pytest.fail(f"{len(failed)} client requests failed: " + "; ".join(
            f"{name} {'stream' if r.stream else 'request'}: {r.outcome} {r.why[:200]!r}" for name, r in failed[:4])
            + gateway_log(cluster, transport, context["clients_since"]))


def gateway_log(cluster, transport, since: int) -> str:
    """What the gateway's hold (the wake service) and nginx said while the clients ran: why a request failed."""
    wake = layout.path(cluster, "wake_unit").rsplit("/", 1)[-1]
    result = transport.run(cluster.gateway.node, f"journalctl -u {wake} --since @{since} -o short-unix -n 40 "
                           "--no-pager; echo '-- nginx:'; tail -n 15 /var/log/nginx/error.log", timeout=30)
    return f"\nthe gateway ({cluster.gateway.node}) meanwhile:\n{result.stdout[-6000:]}{result.stderr[-500:]}"
