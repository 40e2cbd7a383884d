"""Steps of performance.feature and gpus.feature: decode, first token and GPU figures against targets."""

import statistics
import threading
import time

import pytest
from pytest_bdd import parsers, then, when

from clusterbook.acceptance.steps.helpers import url_of
from clusterbook.effects import probes
from clusterbook.pure.planner import reach


@when(parsers.parse("each tier with targets generates {tokens:d} tokens {runs:d} times with the fixed prompt"))
def _generate_timed(cluster, transport, context, measured, tokens, runs):
    results = {}
    for tier in cluster.tiers:
        targets = cluster.targets_for(tier.name)
        if not targets or not (targets.decode_tps or targets.ttft_s):
            measured(f"{tier.name} decode and TTFT", "not measured: no target in the cluster file")
            continue
        key = probes.api_key(transport, cluster, tier)
        url, model = url_of(cluster, transport, tier), tier.served_models[0]
        probes.chat(url, model, key, max_tokens=4)  # warm up (loads a router-mode model)
        samples = [probes.timed_chat(url, model, key, tokens) for _ in range(runs)]
        decode = statistics.median(s.decode_tps for s in samples)
        ttft = statistics.median(s.ttft_s for s in samples)
        measured(f"{tier.name} decode tok/s (median of {runs})", round(decode, 1))
        measured(f"{tier.name} TTFT s (median of {runs})", round(ttft, 3))
        results[tier.name] = (targets, decode, ttft, [round(s.decode_tps, 1) for s in samples])
    if not results:
        pytest.skip("no tier has decode or time-to-first-token targets")
    context["performance"] = results


@then("the median decode throughput is at or above the tier's target")
def _decode_target(context, measured):
    for name, (targets, decode, _, samples) in context["performance"].items():
        if not targets.decode_tps:
            measured(f"{name} decode", "no decode_tps target: reported, not judged")
        else:
            assert decode >= targets.decode_tps.target, \
                f"tier {name}: expected decode ≥ {targets.decode_tps.target:g} tok/s (target), measured median " \
                f"{decode:.1f} tok/s (runs: {samples})"


@then("the median time to first token is at or below the tier's target")
def _ttft_target(context, measured):
    for name, (targets, _, ttft, _) in context["performance"].items():
        if not targets.ttft_s:
            measured(f"{name} TTFT", "no ttft_s target: reported, not judged")
        else:
            assert ttft <= targets.ttft_s.target, \
                f"tier {name}: expected time to first token ≤ {targets.ttft_s.target:g} s (target), measured " \
                f"median {ttft:.2f} s"


@when("each tier with GPU targets generates tokens while its GPUs are sampled")
def _sample_gpus(cluster, transport, context):
    tiers = [t for t in cluster.tiers if (tg := cluster.targets_for(t.name)) and (tg.gpu_util_pct or tg.gpu_mem_gib)]
    if not tiers:
        pytest.skip("no tier has GPU targets")
    for tier in tiers:
        for node in tier.nodes:
            if not cluster.node(node).gpus:
                pytest.skip(f"no GPU on {node}")
    samples: dict[str, list[tuple[float, float]]] = {}
    for tier in tiers:
        key = probes.api_key(transport, cluster, tier)
        worker = threading.Thread(target=probes.timed_chat, args=(url_of(cluster, transport, tier),
                                                                  tier.served_models[0], key, 256))
        worker.start()
        while worker.is_alive():
            for node in tier.nodes:
                out = transport.run(node, "nvidia-smi --query-gpu=utilization.gpu,memory.used "
                                          "--format=csv,noheader,nounits").stdout
                for i, line in enumerate(out.splitlines()):
                    util, mem = (float(x) for x in line.split(","))
                    samples.setdefault(f"{tier.name}:{node}:GPU{i}", []).append((util, mem / 1024))
            time.sleep(0.5)
    context["gpus"] = samples


@then("every GPU's utilisation is at or above the tier's target")
def _gpu_util(cluster, context, measured):
    for gpu, values in context["gpus"].items():
        tier, node, index = gpu.split(":")
        judged = reach.judged_gpu_util(cluster, cluster.tier(tier), node, int(index.removeprefix("GPU")))
        peak = max(u for u, _ in values)
        measured(f"{gpu} peak utilisation %", peak)
        if not judged:
            measured(f"{gpu} utilisation", "no gpu_util_pct target, or no plan for this GPU: reported, not judged")
        else:  # a layer split keeps each GPU busy only its share of a token: the plan says how much (reach.py)
            measured(f"{gpu} utilisation target %", f"{judged.target:.3g}, {judged.why}")
            assert peak >= judged.target, (f"{gpu}: expected utilisation ≥ {judged.target:.3g} % ({judged.why}), "
                                           f"peak {peak:g} %")


@then("every GPU's memory is at or below the tier's target")
def _gpu_mem(cluster, context, measured):
    for gpu, values in context["gpus"].items():
        target = cluster.targets_for(gpu.split(":")[0]).gpu_mem_gib
        peak = max(m for _, m in values)
        measured(f"{gpu} peak memory GiB", round(peak, 2))
        if not target:
            measured(f"{gpu} memory", "no gpu_mem_gib target: reported, not judged")
        else:
            assert peak <= target.target, f"{gpu}: expected memory ≤ {target.target:g} GiB, peak {peak:.2f} GiB"

