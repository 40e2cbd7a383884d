"""The Given steps every feature starts from."""


import httpx
from pytest_bdd import given

from clusterbook.acceptance.steps.helpers import through_gateway, wake_state
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner.loadtime import wait_cap_s


@given("the cluster file")
def _cluster_file(cluster, transport):
    """A tier on demand that the keeper released is woken first (a request through the gateway), so the scenarios
    find every tier serving."""
    for tier in (t for t in cluster.tiers if t.on_demand and t.manager == "slurm" and cluster.gateway):
        if wake_state(cluster, transport, tier).get("state") == "released":
            cap = wait_cap_s(cluster, tier, plan_tier(cluster, tier))
            status = httpx.get(through_gateway(cluster, tier, False) + "/health", timeout=cap + 30).status_code
            assert status == 200, f"tier {tier.name}: released on demand, and a request did not wake it ({status})"
    return cluster


@given("the cluster file, its tiers on demand as they are")
def _cluster_file_as_is(cluster):
    return cluster

