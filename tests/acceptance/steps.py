"""Generic acceptance steps: every value comes from the cluster file; failures say what was expected and measured."""

import json
import math
import os
import re
import shlex
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pytest_bdd import given, parsers, then, when

from clusterbook.effects import probes
from clusterbook.model.schema import RouterTier, RpcTier
from clusterbook.pure import topology as topo
from clusterbook.pure.planner.capacity import plan_cluster, plan_tier
from clusterbook.pure.planner.loadtime import cold_start_at_most_s, cold_start_s, predict_load, wait_cap_s, whole_s
from clusterbook.pure.planner.residency import plan_residency
from clusterbook.pure.render.artifacts import selector_nodes, selector_rows


def rpc_tiers(cluster, manager=None, among=None):
    """The RPC tiers (of one manager), among the tiers under test when given."""
    return [t for t in cluster.tiers if isinstance(t, RpcTier) and manager in (None, t.manager)
            and (among is None or t.name in {x.name for x in among})]


def controller(cluster):
    return cluster.slurm_controller


def registered(cluster, transport, tier):
    """host, port and job of a SLURM tier from its endpoint record, or None."""
    return probes.registered_endpoint(transport, cluster, tier)


def url_of(cluster, transport, tier):
    """Where a tier answers: its configured endpoint, or for a SLURM tier wherever its job registered."""
    if tier.manager != "slurm":
        return topo.endpoint_url(cluster, tier)
    record = registered(cluster, transport, tier)
    if not record:
        pytest.fail(f"tier {tier.name}: no endpoint record in {cluster.storage.endpoint_dir} (is its job running?)")
    return f"http://{record['host']}:{record['port']}"


def systemd_rpc_tier(cluster):
    tiers = rpc_tiers(cluster, "systemd")
    if not tiers:
        pytest.skip("every RPC tier runs under SLURM: its job script restarts a killed worker step (see the scenario "
                    "\"A killed RPC worker step is started again inside its job\")")
    return tiers[0]


def until_answers(cluster, transport, tier, deadline_s: float) -> float:
    """Seconds until the tier answers a chat completion (polling), or fail after deadline_s."""
    started = time.monotonic()
    key = probes.api_key(transport, cluster, tier)
    last = ""
    while time.monotonic() - started < deadline_s:
        try:
            probes.chat(url_of(cluster, transport, tier), tier.served_models[0], key, max_tokens=4, timeout=30)
            return time.monotonic() - started
        except (httpx.HTTPError, ValueError, pytest.fail.Exception) as exc:
            last = str(exc)
            time.sleep(1)
    pytest.fail(f"tier {tier.name}: expected an answer within {deadline_s:g} s, none came (last error: {last})")


def recovery_target(cluster, tier) -> float:
    """After a restart in place (systemd, or a SLURM job script restarting its steps)."""
    return cluster.recovery_level(tier.name).target


def alert_window(cluster, tier) -> float:
    """After SLURM requeues the job or the keeper submits it again: back before the tier's down alert fires (the
    recovery level's critical value is that alert's window)."""
    return cluster.recovery_level(tier.name).critical


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


# --- RPC workers -------------------------------------------------------------------------------------
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
    import socket

    def reaches(address: str, port: int) -> bool:
        try:  # this machine is not one of the tier's nodes: the rule must drop it
            socket.create_connection((address, port), timeout=3).close()
            return True
        except OSError:
            return False

    pairs = [(tier, worker) for tier in rpc_tiers(cluster) for worker in tier.workers]
    for tier, worker in pairs:
        table = "clusterbook_" + tier.name.replace("-", "_")
        listed = transport.run(worker, f"nft list table inet {table}")
        assert listed.ok, f"{worker}: expected nftables table {table} ({tier.manager} tier), {listed.tail()}"
    with ThreadPoolExecutor(max(1, len(pairs))) as pool:  # side by side: each dropped connection waits 3 s
        reached = list(pool.map(lambda p: reaches(cluster.node(p[1]).addresses[cluster.rpc_network], p[0].rpc_port),
                                pairs))
    for (tier, worker), open_ in zip(pairs, reached, strict=True):
        address = cluster.node(worker).addresses[cluster.rpc_network]
        assert not open_, f"{worker}: port {tier.rpc_port} on {address} accepted a connection from outside the tier"


# --- serving ------------------------------------------------------------------------------------------
@then("every tier answers /health with 200")
def _health(cluster, transport, tiers):
    for tier in tiers:
        url = url_of(cluster, transport, tier) + "/health"
        status = httpx.get(url, timeout=10).status_code
        assert status == 200, f"{url}: expected 200, got {status}"


@then("every tier lists every model it serves")
def _lists_models(cluster, transport, tiers):
    for tier in tiers:
        key = probes.api_key(transport, cluster, tier)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = httpx.get(url_of(cluster, transport, tier) + "/v1/models", headers=headers, timeout=10).json()
        ids = {m["id"] for m in data["data"]}
        missing = set(tier.served_models) - ids
        assert not missing, f"tier {tier.name}: expected /v1/models to list {sorted(tier.served_models)}, " \
                            f"it lists {sorted(ids)}"


@then("a chat completion sent to every tier at the same moment is answered by each, unless the plan says the tiers "
      "cannot run together")
def _all_at_once(cluster, transport, measured, tiers):
    """Issue 30: a placement that serves every tier is proven by serving them together, not one after another."""
    excluded = {frozenset((e.first, e.second)) for e in plan_residency(cluster, plan_cluster(cluster)).exclusions}
    together = [t for t in tiers if not any(frozenset((t.name, o.name)) in excluded for o in tiers)]
    if len(together) < 2:
        pytest.skip(f"fewer than two tiers the plan runs together among {', '.join(t.name for t in tiers)}")
    jobs = {t.name: (url_of(cluster, transport, t), t.served_models[0], probes.api_key(transport, cluster, t))
            for t in together}
    answers: dict[str, object] = {}
    start = threading.Barrier(len(jobs))

    def ask(name: str) -> None:
        url, model, key = jobs[name]
        start.wait()  # every request leaves at the same moment
        began = time.monotonic()
        try:
            answer = probes.chat(url, model, key, max_tokens=32, timeout=120)  # long enough to overlap
            answers[name] = (answer["usage"]["completion_tokens"], began, time.monotonic())
        except httpx.HTTPError as exc:
            answers[name] = exc

    threads = [threading.Thread(target=ask, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    failed = {n: a for n, a in answers.items() if not isinstance(a, tuple)}
    assert not failed and len(answers) == len(jobs), f"expected every tier to answer together, got {failed or answers}"
    overlap = min(a[2] for a in answers.values()) - max(a[1] for a in answers.values())
    for name, (tokens, began, ended) in answers.items():
        assert tokens > 0, f"tier {name}: answered with no token"
        measured(f"{name} answer while the others ran (s)", round(ended - began, 2))
    assert overlap > 0, "the requests did not overlap: no proof that the tiers served at the same time"
    skipped = sorted({t.name for t in tiers} - set(jobs))
    if skipped:
        measured("not asked together (the plan's exclusion)", ", ".join(skipped))


@then("every model of every tier answers a chat completion within the API response target")
def _every_model_answers(cluster, transport, measured, tiers):
    for tier in tiers:
        targets = cluster.targets_for(tier.name)
        limit = targets.api_response_s.target if targets and targets.api_response_s else None
        key = probes.api_key(transport, cluster, tier)
        for model in tier.served_models:
            started = time.monotonic()
            answer = probes.chat(url_of(cluster, transport, tier), model, key, max_tokens=8)
            seconds = time.monotonic() - started
            measured(f"{model} answer (s)", round(seconds, 2))
            assert answer["usage"]["completion_tokens"] == 8, f"{model}: expected 8 tokens, got {answer['usage']}"
            if limit is not None:
                # the first request to a router-mode model includes loading it
                assert seconds <= limit, f"{model}: expected an answer within {limit:g} s, took {seconds:.1f} s"


@then("every tier with an API key answers 401 to a request without it")
def _needs_key(cluster, transport):
    tiers = [t for t in cluster.tiers if t.api_key]
    if not tiers:
        pytest.skip("no tier has an API key configured")
    for tier in tiers:
        r = httpx.post(url_of(cluster, transport, tier) + "/v1/chat/completions", timeout=30, json={
            "model": tier.served_models[0], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        assert r.status_code == 401, f"tier {tier.name}: expected 401 without the key, got {r.status_code}"


# --- distribution ---------------------------------------------------------------------------------------
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


def run_invoke(cluster_file, *argv, timeout=600):
    """An invoke task of this cluster as an operator runs it; fails the step with its output if it fails."""
    import subprocess
    import sys

    from .conftest import ROOT
    run = subprocess.run([sys.executable, "-m", "invoke", *argv, "--cluster", str(cluster_file)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, f"invoke {' '.join(argv)}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return run


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


# --- performance ----------------------------------------------------------------------------------------
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


# --- GPUs -------------------------------------------------------------------------------------------------
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
        target = cluster.targets_for(gpu.split(":")[0]).gpu_util_pct
        peak = max(u for u, _ in values)
        measured(f"{gpu} peak utilisation %", peak)
        if not target:
            measured(f"{gpu} utilisation", "no gpu_util_pct target: reported, not judged")
        else:
            assert peak >= target.target, f"{gpu}: expected utilisation ≥ {target.target:g} %, peak {peak:g} %"


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


# --- resilience --------------------------------------------------------------------------------------------
@when("the last worker node of the first RPC tier restarts")
def _restart_node(cluster, cluster_file, transport, context, measured):
    from .conftest import ROOT, is_lab

    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    tier = rpc_tiers(cluster)[0]  # either manager: a SLURM job loses its worker step and is requeued
    node = tier.workers[-1]
    context.update(tier=tier, node=node)
    if is_lab(cluster_file):
        from clusterbook.effects.lab.lab import Lab
        power_off, boot = Lab(cluster, ROOT).restart(node)
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
    from clusterbook.effects.recovery import disrupt

    tier = systemd_rpc_tier(cluster)
    disrupt(cluster, transport, tier, "worker killed")  # what bench.recovery does; fails naming node and command
    context.update(tier=tier, node=tier.workers[0], started=time.monotonic())


@then("the tier answers a chat completion again within the recovery target")
@then("the tier answers a chat completion again within the recovery target, or before its down alert fires where "
      "SLURM requeues its job")
def _recovers(cluster, transport, context, measured):
    tier = context["tier"]
    predicted = predict_load(cluster, tier, plan_tier(cluster, tier))
    measured(f"{tier.name} predicted recovery s (planner)", round(predicted.recovery_s, 1))
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
    measured(f"{tier.name} recovery s", round(total, 1))
    assert total <= limit, f"tier {tier.name}: expected to answer within {limit:g} s, took {total:.1f} s"
    for endpoint in topo.rpc_endpoints(cluster, tier):  # and runs on every worker again
        address, port = endpoint.split(":")
        assert probes.connected(transport, tier.head, address, int(port)), \
            f"tier {tier.name}: answers again, but without the worker at {endpoint}"


# --- router -------------------------------------------------------------------------------------------------
@then("on every node that has the selector, every task maps to the configured model and endpoint")
def _router(cluster, transport):
    if not cluster.router:
        pytest.skip("no model router in the cluster file")
    for node in selector_nodes(cluster):
        for row in selector_rows(cluster):
            out = transport.run(node, f"{cluster.router.script} --json {row['task']}")
            assert out.ok, f"{node}: {cluster.router.script} {row['task']} failed: {out.tail()}"
            assert json.loads(out.stdout) == row, f"{node}: task {row['task']}: expected {row}, got {out.stdout}"


# --- SLURM and the gateway ---------------------------------------------------------------------------------
def slurm_tiers(cluster):
    tiers = [t for t in cluster.tiers if t.manager == "slurm"]
    if not tiers:
        pytest.skip("no tier runs under SLURM in this cluster file")
    return tiers


def gateway_base(cluster):
    if not cluster.gateway:
        pytest.skip("no gateway in this cluster file")
    return cluster.gateway.listen[0]


def job_state(cluster, transport, tier) -> str:
    out = transport.run(controller(cluster), f"squeue -h -n {topo.units(tier).job} -o '%T %N'").stdout.strip()
    return out or "none"


@then("every SLURM tier has a running job whose registered endpoint answers /health, unless the plan says it "
      "waits for a running tier")
def _slurm_running(cluster, transport, measured, tiers):
    states = {tier.name: job_state(cluster, transport, tier) for tier in slurm_tiers(cluster)}
    excluded = {frozenset((e.first, e.second)) for e in plan_residency(cluster, plan_cluster(cluster)).exclusions}
    chosen = [t for t in slurm_tiers(cluster) if t.name in {x.name for x in tiers}]
    if not chosen:
        pytest.skip("no SLURM tier among the tiers under test")
    for tier in chosen:
        state = states[tier.name]
        blockers = [t for t, s in states.items() if s.startswith("RUNNING") and frozenset((t, tier.name)) in excluded]
        if blockers and not state.startswith("RUNNING"):  # the plan's exclusion, as the decision log says
            assert state.startswith("PENDING"), f"job {topo.units(tier).job}: expected PENDING behind " \
                                                f"{', '.join(blockers)}, found {state}"
            measured(f"{tier.name} job", f"waits for {', '.join(blockers)} (planned exclusion)")
            continue
        assert state.startswith("RUNNING"), f"job {topo.units(tier).job}: expected RUNNING, found {state}"
        record = registered(cluster, transport, tier)
        assert record and record["tier"] == tier.name, f"tier {tier.name}: expected an endpoint record, found {record}"
        measured(f"{tier.name} job", f"{record['job_id']} on {record['nodes']}")
        status = httpx.get(f"http://{record['host']}:{record['port']}/health", timeout=10).status_code
        assert status == 200, f"tier {tier.name}: registered endpoint answers {status}, expected 200"


def through_gateway(cluster, tier, path_port: bool = True) -> str:
    route = next(r for r in cluster.gateway.routes if r.tier == tier.name)
    if path_port and cluster.gateway.path_port:
        return f"http://{gateway_base(cluster)}:{cluster.gateway.path_port}{route.path.rstrip('/')}"
    return f"http://{gateway_base(cluster)}:{route.port}"


@then("a chat completion through the gateway reaches each tier by its path")
def _gateway_paths(cluster, transport):
    gateway_base(cluster)
    if not cluster.gateway.path_port and not cluster.gateway.tailscale_name:
        pytest.skip("the gateway has no path routing here (no path_port, no tailscale)")
    for route in cluster.gateway.routes:
        tier = cluster.tier(route.tier)
        url = through_gateway(cluster, tier)
        answer = probes.chat(url, tier.served_models[0], probes.api_key(transport, cluster, tier), max_tokens=4)
        assert answer["model"] == tier.served_models[0], f"{url}: expected {tier.served_models[0]}, got {answer}"


@when("a higher-priority job takes the node of the first single-node SLURM tier")
def _preempt(cluster, transport, context, request):
    tiers = [t for t in slurm_tiers(cluster) if isinstance(t, RouterTier)]
    if not tiers or not cluster.slurm:
        pytest.skip("no single-node SLURM tier in a SLURM cluster that clusterbook configures")
    tier = tiers[0]
    record = registered(cluster, transport, tier)
    assert record, f"tier {tier.name}: not registered before the preemption"
    high = max(cluster.slurm.partitions, key=lambda p: p.priority_tier)
    node = record["nodes"]
    out = transport.run(controller(cluster), f"sbatch --parsable -p {high.name} -w {node} --exclusive "
                                             "--job-name=clusterbook-preemptor --wrap 'sleep 900'")
    assert out.ok, out.tail()
    preemptor = out.stdout.strip()
    # should a later step fail, the node must not stay taken for the scenarios after this one
    request.addfinalizer(lambda: transport.run(controller(cluster), f"scancel {shlex.quote(preemptor)}"))
    jobs = {t.name: (registered(cluster, transport, t) or {}).get("job_id") for t in slurm_tiers(cluster)}
    context.update(tier=tier, node=node, host=record["host"], started=time.monotonic(), preemptor=preemptor,
                   jobs=jobs)


@then("the tier's job leaves its node, its endpoint leaves the gateway, and clients get 503 with Retry-After")
def _job_left(cluster, transport, context, measured):
    tier = context["tier"]
    retry_after = str(max(1, math.ceil(predict_load(cluster, tier, plan_tier(cluster, tier)).recovery_s)))
    deadline = time.monotonic() + tier.slurm.grace_seconds + 30
    state, code, header = "", 0, None
    # requeued (PENDING) or cancelled and submitted again by the keeper: either way the record goes first, and a
    # resubmitted job can be back within seconds, so look often
    while time.monotonic() < deadline:
        try:
            response = httpx.get(through_gateway(cluster, tier, False) + "/health", timeout=5)
            code, header = response.status_code, response.headers.get("retry-after")
        except httpx.HTTPError:
            code = 0
        if code == 503 and header == retry_after and registered(cluster, transport, tier) is None:
            context["left"] = time.monotonic()
            state = job_state(cluster, transport, tier)
            measured(f"{tier.name} while its job is away, the gateway answers",
                     f"503, Retry-After: {header} (job {state})")
            return
        time.sleep(0.25)
    state = job_state(cluster, transport, tier)
    pytest.fail(f"tier {tier.name}: expected its record gone and the gateway answering 503 with Retry-After: "
                f"{retry_after}; found job {state}, gateway status {code}, Retry-After: {header}")


@then("the tier answers through the gateway again before its down alert fires, on another node")
def _back_elsewhere(cluster, transport, context, measured):
    tier = context["tier"]
    limit = alert_window(cluster, tier)  # a preempted job is requeued: its hold, a start elsewhere, a load
    url = through_gateway(cluster, tier)
    deadline = context["started"] + max(limit * 2, 300)
    while time.monotonic() < deadline:
        try:
            probes.chat(url, tier.served_models[0], probes.api_key(transport, cluster, tier), max_tokens=4, timeout=20)
            break
        except httpx.HTTPError:
            time.sleep(2)
    elapsed = time.monotonic() - context["started"]
    record = registered(cluster, transport, tier) or {}
    measured(f"{tier.name} back after (s)", round(elapsed, 1))
    measured(f"{tier.name} back after its job left the gateway (s)", round(time.monotonic() - context["left"], 1))
    measured(f"{tier.name} moved", f"{context['node']} -> {record.get('nodes')}")
    assert elapsed <= limit, f"tier {tier.name}: expected to answer through the gateway within {limit:g} s of the " \
                             f"preemption, took {elapsed:.0f} s"
    assert record.get("host") != context["host"], \
        f"tier {tier.name}: expected to come back on another node while {context['node']} is taken, " \
        f"it is on {record.get('nodes')}"


@then("when the higher-priority job ends, every SLURM tier answers through the gateway again on its own")
def _all_back(cluster, transport, context, measured):
    transport.run(controller(cluster), f"scancel {context['preemptor']}")
    ended = time.monotonic()
    for tier in slurm_tiers(cluster):
        # a tier whose job the preemption also ended waits for the node in a new job: a start and a load, bounded
        # by its down alert's window (a CI run: reasoning, head on the preempted node, took over 15 s); a tier
        # still in its job is bounded by its recovery target
        same_job = (registered(cluster, transport, tier) or {}).get("job_id") == context["jobs"].get(tier.name)
        limit = recovery_target(cluster, tier) if same_job else alert_window(cluster, tier)
        seconds = answers_through_gateway(cluster, transport, tier, ended, "after the higher-priority job ended",
                                          limit)
        measured(f"{tier.name} back after the preemptor ended (s)",
                 f"{seconds} ({'same job' if same_job else 'new job'}, limit {limit:g} s)")


def answers_through_gateway(cluster, transport, tier, since: float, after: str, limit: float | None = None) -> float:
    """Seconds from `since` until the tier answers a chat completion through the gateway; fails past `limit`
    (the tier's recovery target unless given)."""
    limit = recovery_target(cluster, tier) if limit is None else limit
    url, last = through_gateway(cluster, tier), ""
    while time.monotonic() - since < limit:
        try:
            probes.chat(url, tier.served_models[0], probes.api_key(transport, cluster, tier), max_tokens=4,
                        timeout=20)
            return round(time.monotonic() - since, 1)
        except httpx.HTTPError as exc:
            last = str(exc)
            time.sleep(2)
    pytest.fail(f"tier {tier.name}: expected to answer through the gateway within {limit:g} s {after} "
                f"(last error: {last})")


@when("the job of every SLURM tier is cancelled with scancel")
def _scancel(cluster, transport, context):
    for tier in slurm_tiers(cluster):
        result = transport.run(controller(cluster), f"scancel -n {topo.units(tier).job}")
        assert result.ok, result.tail()
    context.update(started=time.monotonic())


@then("every SLURM tier's job is pending or running again within two keeper intervals")
def _keeper_resubmits(cluster, transport, context, measured):
    for tier in slurm_tiers(cluster):
        limit = 2 * tier.slurm.keeper_interval_s + 10  # the timer's interval twice, and the job's own start
        while time.monotonic() - context["started"] < limit:
            if job_state(cluster, transport, tier).split()[0] in ("PENDING", "RUNNING", "CONFIGURING"):
                break
            time.sleep(1)
        state = job_state(cluster, transport, tier)
        assert state.split()[0] in ("PENDING", "RUNNING", "CONFIGURING"), \
            f"tier {tier.name}: expected the keeper to submit its job within {limit} s of scancel, found {state}"
        measured(f"{tier.name} submitted again after (s)", round(time.monotonic() - context["started"], 1))
    log = transport.run(controller(cluster), "journalctl -t clusterbook-keeper -n 20 --no-pager").stdout
    assert "submitted it again" in log, f"expected the keeper to log why it submitted a job, found:\n{log}"


@when("an RPC worker step of the first SLURM RPC tier is killed with SIGKILL")
def _kill_worker_step(cluster, transport, context):
    tiers = [t for t in rpc_tiers(cluster) if t.manager == "slurm"]
    if not tiers:
        pytest.skip("no RPC tier runs under SLURM in this cluster file")
    from clusterbook.effects.recovery import disrupt

    tier = tiers[0]
    before = job_restarts(cluster, transport, tier)
    disrupt(cluster, transport, tier, "worker killed")  # pkill of the worker step; fails if there is none to kill
    context.update(tier=tier, node=tier.workers[0], started=time.monotonic(), requeues_before=before)


def job_restarts(cluster, transport, tier) -> tuple[str, int]:
    """The tier's running job and how often SLURM has requeued it (scontrol's Restarts=)."""
    job = transport.run(controller(cluster), f"squeue -h -n {topo.units(tier).job} -t RUNNING -o %i").stdout.split()
    assert job, f"tier {tier.name}: no running job ({job_state(cluster, transport, tier)})"
    shown = transport.run(controller(cluster), f"scontrol show job {job[0]}").stdout
    found = re.search(r"\bRestarts=(\d+)", shown)
    assert found, f"tier {tier.name}: no Restarts= in scontrol show job {job[0]}:\n{shown}"
    return job[0], int(found.group(1))


@then("the tier's job was restarted as its step_restarts say: inside the job, or requeued when it has none")
def _restarted_as_configured(cluster, cluster_file, transport, context, measured):
    tier = context["tier"]
    job, requeues = context["requeues_before"]
    now = job_restarts(cluster, transport, tier)
    log = transport.run(controller(cluster), f"tail -n 200 {cluster.storage.log_dir}/{topo.units(tier).job}-{job}.log"
                        ).stdout
    if tier.slurm.step_restarts:
        assert now == (job, requeues), \
            f"tier {tier.name}: expected job {job} to keep running (Restarts={requeues}), found {now}"
        assert "inside job" in log and f"rpc-worker-{context['node']} ended" in log, \
            f"expected the job log to say it restarted the worker step inside the job:\n{log[-3000:]}"
        measured(f"{tier.name} restarted", f"inside job {job}, no requeue")
    else:
        assert now[1] > requeues, f"tier {tier.name}: step_restarts 0: expected a requeue, found {now}"
        measured(f"{tier.name} restarted", f"job {job} requeued")


@then("every SLURM tier answers through the gateway again within its recovery target")
def _slurm_back(cluster, transport, context, measured):
    for tier in slurm_tiers(cluster):
        seconds = answers_through_gateway(cluster, transport, tier, context["started"], "of the disruption")
        measured(f"{tier.name} back after (s)", seconds)


@then("every SLURM tier answers through the gateway again before its down alert fires")
def _slurm_back_resubmitted(cluster, transport, context, measured):
    for tier in slurm_tiers(cluster):
        seconds = answers_through_gateway(cluster, transport, tier, context["started"], "of the disruption",
                                          alert_window(cluster, tier))
        measured(f"{tier.name} back after (s)", seconds)


@then("invoke logs for that tier shows the job's state and the worker step's end")
def _logs_show_the_end(cluster_file, context, measured):
    tier = context["tier"]
    text = run_invoke(cluster_file, "logs", "--tier", tier.name, timeout=120).stdout
    assert f"== {tier.name}: SLURM job {topo.units(tier).job}" in text, text[-3000:]
    assert "JobState=" in text or "queued or running: job" in text, text[-3000:]
    assert f"rpc-worker-{context['node']} ended" in text, \
        f"expected the job log to say the worker step on {context['node']} ended:\n{text[-3000:]}"
    measured(f"{tier.name} logs", "job state, end reason and the worker step's end shown")


# --- monitoring ---------------------------------------------------------------------------------------------
def monitored(cluster):
    if not cluster.monitoring:
        pytest.skip("no monitoring section in this cluster file")
    return cluster.monitoring


def alert_firing(cluster, transport, tier) -> bool:
    return bool(probes.prometheus_query(
        transport, cluster, f'ALERTS{{alertname="TierDown", tier="{tier.name}", alertstate="firing"}}'))


@then("every node exporter and every RPC tier's server is up in Prometheus")
def _scraped(cluster, transport, measured):
    monitored(cluster)
    from clusterbook.pure.render.monitoring import job

    deadline, down = time.monotonic() + 4 * cluster.monitoring.scrape_interval_s + 30, ["?"]
    expected = {f"node {n.name}" for n in cluster.nodes} | {f"{job(t)}" for t in rpc_tiers(cluster)}
    while time.monotonic() < deadline:
        series = probes.prometheus_query(transport, cluster, "up")
        # the best of each name's series: a target of an earlier configuration (another lab file's, before
        # Prometheus restarted) keeps its last sample for Prometheus's 5-minute lookback, without a staleness marker
        seen: dict[str, str] = {}
        for s in series:
            name = f"node {s['metric'].get('node')}" if s["metric"]["job"] == "node" else s["metric"]["job"]
            seen[name] = max(seen.get(name, "0"), s["value"][1])
        down = sorted(name for name in expected if seen.get(name) != "1")
        if not down:
            measured("targets up", len(series))
            routers = {s["metric"]["model"]: s["value"][1] for s in series if s["metric"].get("model")}
            if routers:
                measured("router-mode targets (up while their model is loaded)", routers)
            return
        time.sleep(3)
    pytest.fail(f"expected every node exporter and RPC tier up in Prometheus; not up: {', '.join(down)}")


def probed(cluster, transport, metric: str) -> dict[str, str]:
    """The tier probe's latest figure of each tier, from Prometheus: as the monitoring node's node exporter serves
    it now (the exporter of an earlier configuration, on another port, keeps its last sample for Prometheus's
    5-minute lookback: another lab file's tiers, down when that file's tests ended)."""
    exporter = f"{topo.address(cluster, cluster.monitoring.node)}:{cluster.monitoring.node_exporter_port}"
    return {s["metric"]["tier"]: s["value"][1] for s in probes.prometheus_query(transport, cluster, metric)
            if s["metric"].get("instance") == exporter}


@then("the probe reports every tier healthy, registered and not pending where SLURM runs it")
def _probe_healthy(cluster, transport, measured):
    m = monitored(cluster)
    deadline, wrong = time.monotonic() + m.probe_interval_s + 4 * m.scrape_interval_s + 30, ["?"]
    while time.monotonic() < deadline:
        healthy = probed(cluster, transport, "clusterbook_tier_healthy")
        registered = probed(cluster, transport, "clusterbook_tier_registered")
        pending = probed(cluster, transport, "clusterbook_tier_pending")
        wrong = [f"{t.name} healthy={healthy.get(t.name, 'absent')}" for t in cluster.tiers
                 if healthy.get(t.name) != "1"]
        wrong += [f"{t.name} registered={registered.get(t.name, 'absent')} pending={pending.get(t.name, 'absent')}"
                  for t in cluster.tiers if t.manager == "slurm"
                  and (registered.get(t.name) != "1" or pending.get(t.name) != "0")]
        if not wrong:
            measured("tiers healthy by the probe", sorted(healthy))
            return
        time.sleep(3)
    pytest.fail(f"expected the tier probe to find every tier healthy: {'; '.join(wrong)}")


@then("each RPC tier's time to first token in Prometheus is within its critical level")
def _probe_ttft(cluster, transport, measured):
    m = monitored(cluster)
    deadline, ttft = time.monotonic() + m.probe_interval_s + 4 * m.scrape_interval_s + 30, {}
    wanted = {t.name for t in rpc_tiers(cluster)}
    while time.monotonic() < deadline and not wanted <= ttft.keys():
        ttft = probed(cluster, transport, "clusterbook_tier_ttft_seconds")
        time.sleep(3)
    assert wanted <= ttft.keys(), f"expected a time to first token of {sorted(wanted)} from the probe, got {ttft}"
    for name in sorted(wanted):
        targets = cluster.targets_for(name)
        measured(f"{name} time to first token (probe) s", float(ttft[name]))
        if targets and targets.ttft_s:
            assert float(ttft[name]) <= targets.ttft_s.critical, \
                f"tier {name}: first token after {float(ttft[name]):.2f} s, critical {targets.ttft_s.critical:g} s"


@when("the first RPC tier generates 32 tokens")
def _generate_counted(cluster, transport, context):
    monitored(cluster)
    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    from clusterbook.pure.render.monitoring import job

    tier = rpc_tiers(cluster)[0]
    counter = f'sum(llamacpp:tokens_predicted_total{{job="{job(tier)}"}})'
    before = probes.prometheus_query(transport, cluster, counter)
    probes.chat(url_of(cluster, transport, tier), tier.served_models[0], probes.api_key(transport, cluster, tier),
                max_tokens=32)
    context.update(tier=tier, counter=counter, before=float(before[0]["value"][1]) if before else 0.0)


@then("Prometheus sees that tier's generated-token counter grow by at least 32")
def _counter_grows(cluster, transport, context, measured):
    deadline, grown = time.monotonic() + 3 * cluster.monitoring.scrape_interval_s + 15, 0.0
    while time.monotonic() < deadline:
        after = probes.prometheus_query(transport, cluster, context["counter"])
        grown = (float(after[0]["value"][1]) if after else 0.0) - context["before"]
        if grown >= 32:
            measured(f"{context['tier'].name} tokens counted by Prometheus", grown)
            return
        time.sleep(2)
    pytest.fail(f"tier {context['tier'].name}: expected llamacpp:tokens_predicted_total to grow by 32, grew by "
                f"{grown:g}")


@when("the first RPC tier is stopped until its tier-down alert fires")
def _down_until_alert(cluster, cluster_file, transport, context, measured):
    monitored(cluster)
    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    tier = rpc_tiers(cluster)[0]
    window = cluster.recovery_level(tier.name).critical
    # the tier goes down somewhere inside the stop command (its head stops first), so the window counts from
    # before the command: counted from its end, a stop that took 10 s under load read as an alert 10 s early
    started = time.monotonic()
    result = run_invoke(cluster_file, f"stop.{tier.name}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    measured(f"{tier.name} stop command s", round(time.monotonic() - started, 1))
    context.update(tier=tier, window=window)
    try:
        limit = window + 4 * cluster.monitoring.scrape_interval_s + 60
        while time.monotonic() - started < limit and not alert_firing(cluster, transport, tier):
            if probed(cluster, transport, "clusterbook_tier_healthy").get(tier.name) == "0":
                context["probe_saw_down"] = True
            time.sleep(5)
        context["fired_after"] = time.monotonic() - started if alert_firing(cluster, transport, tier) else None
        # the probe runs on its own timer: a window shorter than its interval can end before it looked once
        seen_by = started + cluster.monitoring.probe_interval_s + 3 * cluster.monitoring.scrape_interval_s + 10
        while not context.get("probe_saw_down") and time.monotonic() < seen_by:
            if probed(cluster, transport, "clusterbook_tier_healthy").get(tier.name) == "0":
                context["probe_saw_down"] = True
            time.sleep(2)
    finally:
        result = run_invoke(cluster_file, f"deploy.{tier.name}")  # the tier comes back whatever happened
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        context["back"] = time.monotonic()
    measured(f"{tier.name} TierDown for window s", window)
    measured(f"{tier.name} TierDown fired after the stop began s", round(context["fired_after"], 1)
             if context["fired_after"] is not None else "never")


@then("the probe saw the tier unhealthy while it was down")
def _probe_saw_down(context):
    assert context.get("probe_saw_down"), f"tier {context['tier'].name}: the probe never reported it unhealthy"


@then("the alert fired once its for window had passed, and resolves after the tier is deployed again")
def _alert_cycle(cluster, transport, context, measured):
    tier, window, fired = context["tier"], context["window"], context["fired_after"]
    assert fired is not None, f"tier {tier.name}: TierDown did not fire within {window:g} s and the scrapes after"
    assert fired >= window, (f"tier {tier.name}: TierDown fired {fired:.0f} s after the stop began, before its "
                             f"{window:g} s window")
    deadline = context["back"] + 4 * cluster.monitoring.scrape_interval_s + 30
    while time.monotonic() < deadline and alert_firing(cluster, transport, tier):
        time.sleep(3)
    assert not alert_firing(cluster, transport, tier), f"tier {tier.name}: TierDown still fires after redeploy"
    measured(f"{tier.name} TierDown resolved after redeploy s", round(time.monotonic() - context["back"], 1))


# --- the fabric ---------------------------------------------------------------------------------------------
@then("iperf3 from the head to each worker over the RPC network reaches the tier's fabric target")
def _fabric(cluster, transport, measured):
    from clusterbook.effects.fabric import measure

    if not rpc_tiers(cluster):
        pytest.skip("no RPC tier in this cluster file")
    for tier in rpc_tiers(cluster):
        targets = cluster.targets_for(tier.name)
        level = targets.fabric_gbps if targets else None
        for link in measure(cluster, transport, tier, seconds=3):
            measured(f"{link.head} -> {link.worker} Gbit/s", link.gbps)
            if level:
                assert link.gbps >= level.target, (f"tier {tier.name}: expected ≥ {level.target:g} Gbit/s from "
                                                   f"{link.head} to {link.worker} ({link.source} -> {link.target}), "
                                                   f"measured {link.gbps:.2f}")


# --- tiers on demand -----------------------------------------------------------------------------------------------
def on_demand_tier(cluster):
    tiers = [t for t in cluster.tiers if t.on_demand and t.manager == "slurm"]
    if not tiers or not cluster.gateway:
        pytest.skip("no tier on demand in this cluster file")
    return tiers[0]


def wake_state(cluster, transport, tier) -> dict:
    """The wake service's view of the tier: {"state": released | starting | serving | stopped, "reason": ...}."""
    out = transport.run(cluster.keeper_node, f"curl -sf -m 10 http://127.0.0.1:{cluster.gateway.wake_port}/state")
    assert out.ok, f"the wake service on {cluster.keeper_node} does not answer: {out.tail()}"
    return json.loads(out.stdout).get(tier.name, {})


def job_ids(cluster, transport, tier) -> set[str]:
    out = transport.run(controller(cluster) or cluster.keeper_node, f"squeue -h -n {topo.units(tier).job} -o %i")
    return set(out.stdout.split())


@when("the first tier on demand has had no request for its idle time")
def _idle_until_released(cluster, transport, context, measured):
    tier = on_demand_tier(cluster)
    limit = tier.on_demand.idle_s + 3 * tier.slurm.keeper_interval_s + 60
    started, state = time.monotonic(), {}
    while time.monotonic() - started < limit:
        state = wake_state(cluster, transport, tier)
        if state.get("state") == "released":
            measured(f"{tier.name} released", state.get("reason", ""))
            context.update(tier=tier)
            return
        time.sleep(2)
    pytest.fail(f"tier {tier.name}: expected the keeper to release it within {limit:g} s of idleness "
                f"(idle_s {tier.on_demand.idle_s}); the wake service says {state}")


@then("its job has left the queue and the wake service calls it released")
def _released(cluster, transport, context, measured):
    tier = context["tier"]
    started = time.monotonic()  # the keeper cancels the job once the wake service has released the tier
    deadline = started + tier.slurm.grace_seconds + 2 * tier.slurm.keeper_interval_s + 15
    while time.monotonic() < deadline and (job_ids(cluster, transport, tier) or registered(cluster, transport, tier)):
        time.sleep(1)
    assert not job_ids(cluster, transport, tier), f"tier {tier.name}: released, but its job is still queued"
    assert registered(cluster, transport, tier) is None, f"tier {tier.name}: released, but its record remains"
    measured(f"{tier.name} job gone after the release (s)", round(time.monotonic() - started, 1))


def cold_request(cluster, transport, tier, timeout: float) -> tuple[float, int, dict]:
    """One chat completion through the gateway to a released tier: (seconds, HTTP status, headers)."""
    key = probes.api_key(transport, cluster, tier)
    started = time.monotonic()
    response = httpx.post(f"{through_gateway(cluster, tier, False)}/v1/chat/completions", timeout=timeout,
                          headers={"Authorization": f"Bearer {key}"} if key else {},
                          json={"model": tier.served_models[0], "max_tokens": 4,
                                "messages": [{"role": "user", "content": "Say OK."}]})
    return time.monotonic() - started, response.status_code, dict(response.headers)


@then("its first request through the gateway is answered, within 25 % of the predicted cold start")
def _cold_answered(cluster, transport, context, measured):
    tier = context["tier"]
    plan = plan_tier(cluster, tier)
    predicted, cap = cold_start_s(cluster, tier, plan), wait_cap_s(cluster, tier, plan)
    at_most = cold_start_at_most_s(cluster, tier, plan)
    # A first request comes minutes after a release in use: wait out the scheduling pass that the released job's
    # end started (SLURM starts no batch job within batch_sched_delay of its last pass). Its periodic pass may
    # still come just before the request: the planner's bound counts that delay.
    time.sleep(3)
    seconds, status, _ = cold_request(cluster, transport, tier, cap + 30)
    measured(f"{tier.name} cold start s (first request, answered)", round(seconds, 1))
    measured(f"{tier.name} cold start s (planner)", round(predicted, 1))
    measured(f"{tier.name} cold start s (planner, just after a SLURM pass)", round(at_most, 1))
    assert status == 200, f"tier {tier.name}: the first request after the release got {status}, expected 200"
    assert 0.75 * predicted <= seconds <= 1.25 * at_most, \
        f"tier {tier.name}: the first request took {seconds:.1f} s, the planner predicted {predicted:.1f} s, " \
        f"{at_most:.1f} s when SLURM ran a scheduling pass just before (more than 25 % outside)"


@then("ten concurrent first requests through the gateway are all answered by one new job")
def _ten_at_once(cluster, transport, context, measured):
    tier = context["tier"]
    cap = wait_cap_s(cluster, tier, plan_tier(cluster, tier))
    since = transport.run(cluster.keeper_node, "date +%s").stdout.strip()  # the node's clock, for its journal
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda _: cold_request(cluster, transport, tier, cap + 30), range(10)))
    statuses = [status for _, status, _ in results]
    seconds = [s for s, _, _ in results]
    measured(f"{tier.name} ten first requests", f"{statuses.count(200)} answered in {min(seconds):.1f}-"
                                                f"{max(seconds):.1f} s")
    assert statuses == [200] * 10, f"tier {tier.name}: expected ten 200s, got {statuses}"
    record = registered(cluster, transport, tier) or {}
    jobs = job_ids(cluster, transport, tier)
    assert len(jobs) == 1 and record.get("job_id") in jobs, \
        f"tier {tier.name}: expected one job serving every request, found jobs {jobs}, record {record}"
    log = transport.run(cluster.keeper_node, f"journalctl -t clusterbook-keeper --since=@{since} --no-pager").stdout
    submissions = [ln for ln in log.splitlines() if f"{topo.units(tier).job}: no pending or running job" in ln]
    assert len(submissions) == 1, f"tier {tier.name}: expected the keeper to submit one job, it logged {submissions}"


@when("its partition takes no jobs for a while")
def _partition_down(cluster, transport, context, request):
    tier = context["tier"]
    if not cluster.slurm:
        pytest.skip("the partition is the site's: clusterbook only takes down a partition of a SLURM it configures")
    part = tier.slurm.partition
    down = transport.run(controller(cluster), f"scontrol update PartitionName={part} State=DOWN")
    assert down.ok, down.tail()
    # should a later step fail, the partition must not stay down for the scenarios after this one
    request.addfinalizer(lambda: transport.run(controller(cluster), f"scontrol update PartitionName={part} State=UP"))
    context.update(partition=part)


@then("a request through the gateway gets 503 with Retry-After once the tier's cap has passed")
def _past_cap(cluster, transport, context, measured):
    tier = context["tier"]
    plan = plan_tier(cluster, tier)
    cap, retry = wait_cap_s(cluster, tier, plan), str(whole_s(cold_start_s(cluster, tier, plan)))
    seconds, status, headers = cold_request(cluster, transport, tier, cap + 30)
    measured(f"{tier.name} past the cap", f"{status} after {seconds:.1f} s, Retry-After: {headers.get('retry-after')}")
    assert status == 503 and headers.get("retry-after") == retry, \
        f"tier {tier.name}: expected 503 with Retry-After: {retry}, got {status} with {headers.get('retry-after')}"
    assert cap <= seconds <= cap + 10, f"tier {tier.name}: the 503 came after {seconds:.1f} s, its cap is {cap} s"


@then("once the partition is up again, the tier answers its next request")
def _partition_up(cluster, transport, context, measured):
    tier = context["tier"]
    up = transport.run(controller(cluster), f"scontrol update PartitionName={context['partition']} State=UP")
    assert up.ok, up.tail()
    cap = wait_cap_s(cluster, tier, plan_tier(cluster, tier))
    seconds, status, _ = cold_request(cluster, transport, tier, cap + 30)
    measured(f"{tier.name} answered after the partition came up (s)", round(seconds, 1))
    assert status == 200, f"tier {tier.name}: expected 200 once the partition is up, got {status}"
