"""Steps of distribution.feature: heads hold their workers, layers land as planned, the fabric's speed."""

import pytest
from pytest_bdd import then, when

from clusterbook.acceptance.steps.helpers import rpc_tiers, run_invoke, until_answers
from clusterbook.effects import probes
from clusterbook.effects.fabric import measure
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner import reach


@then("every RPC tier head has an established connection to each of its workers")
def _connected(cluster, transport, tiers):
    if not rpc_tiers(cluster, among=tiers):
        pytest.skip("no RPC tier among the tiers under test")
    for tier in rpc_tiers(cluster, among=tiers):
        for endpoint in topo.rpc_endpoints(cluster, tier):
            address, port = endpoint.split(":")
            assert probes.connected(transport, tier.head, address, int(port)), \
                f"{tier.head}: expected a connection to the RPC worker at {endpoint}, found none (the head runs " \
                "without that worker's devices: restart the head, e.g. invoke deploy.reasoning)"


@when("llama.cpp loads each RPC tier's model once more with its own command line")
def _load_reports(cluster, cluster_file, transport, context):
    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    context["reports"] = {}
    for tier in rpc_tiers(cluster):
        if tier.manager == "systemd":  # the head's unit is stopped, its command line run with -lv 4, restarted
            context["reports"][tier.name] = probes.load_report(transport, cluster, tier)
        else:  # the tier's own batch script submitted once more with -lv 4 in its environment, then redeployed
            run_invoke(cluster_file, f"stop.{tier.name}")
            try:
                context["reports"][tier.name] = probes.slurm_load_report(transport, cluster, tier)
            finally:
                run_invoke(cluster_file, f"deploy.{tier.name}")
        until_answers(cluster, transport, tier, 300)


@then("it reports model buffers on every device of the tier, as the capacity plan places them")
def _reports_devices(cluster, context, measured):
    for tier in rpc_tiers(cluster):
        report = context["reports"][tier.name]
        plan = plan_tier(cluster, tier)
        expected_devices = {d.device for d in plan.devices if d.weights}
        measured(f"{tier.name} devices with weights", ", ".join(sorted(report.weights)))
        assert expected_devices <= set(report.weights), \
            f"tier {tier.name}: expected model buffers on {sorted(expected_devices)}, llama.cpp reports " \
            f"{sorted(report.weights)}"
        offloaded = sum(d.blocks for d in plan.devices if d.device != "CPU") + 1
        layers = cluster.model(tier.model).architecture.layers + 1
        assert report.offloaded == (offloaded, layers), \
            f"tier {tier.name}: expected {offloaded}/{layers} layers offloaded, llama.cpp reports {report.offloaded}"


@then("iperf3 from the head to each worker over the RPC network reaches the tier's fabric target")
def _fabric(cluster, transport, measured):

    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    for tier in rpc_tiers(cluster):
        judged = reach.judged_fabric(cluster, tier)  # one stream, as RPC uses one connection per worker
        for link in measure(cluster, transport, tier, seconds=3):
            measured(f"{link.head} -> {link.worker} Gbit/s", link.gbps)
            if judged:
                assert link.gbps >= judged.target, (f"tier {tier.name}: expected ≥ {judged.target:.3g} Gbit/s "
                                                    f"({judged.why}) from {link.head} to {link.worker} "
                                                    f"({link.source} -> {link.target}), measured {link.gbps:.2f}")

