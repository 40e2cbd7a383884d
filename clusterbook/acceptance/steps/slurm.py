"""Steps of slurm.feature: jobs, the gateway, preemption, the keeper and a killed worker step."""

import time

import httpx
import pytest
from pytest_bdd import then, when

from clusterbook.acceptance.steps.helpers import (
    alert_window,
    answers_through_gateway,
    controller,
    gateway_base,
    job_restarts,
    job_state,
    recovery_target,
    registered,
    rpc_tiers,
    run_invoke,
    slurm_tiers,
    through_gateway,
)
from clusterbook.effects import probes
from clusterbook.effects.recovery import disrupt, end_preemption
from clusterbook.pure import slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_cluster, plan_tier
from clusterbook.pure.planner.loadtime import hold_s, new_job_hold_s, predict_load, whole_s
from clusterbook.pure.planner.residency import plan_residency


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


@then("a request through the gateway reaches each tier by its path")
def _gateway_paths(cluster, transport):
    gateway_base(cluster)
    if not cluster.gateway.path_port and not cluster.gateway.tailscale_name:
        pytest.skip("the gateway has no path routing here (no path_port, no tailscale)")
    for route in cluster.gateway.routes:
        tier = cluster.tier(route.tier)
        url = through_gateway(cluster, tier)
        answer = probes.ask(url, tier, probes.api_key(transport, cluster, tier))  # its kind's: chat, embedding
        assert answer["model"] == tier.served_models[0], f"{url}: expected {tier.served_models[0]}, got {answer}"


@when("a higher-priority job takes the node of the first single-node SLURM tier")
def _preempt(cluster, transport, context, request):
    tiers = [t for t in slurm_tiers(cluster) if not t.workers and t.api == "chat"]  # the clients' tier
    if not tiers or not cluster.slurm:
        pytest.skip("no single-node SLURM tier in a SLURM cluster that clusterbook configures")
    tier = tiers[0]
    record = registered(cluster, transport, tier)
    assert record, f"tier {tier.name}: not registered before the preemption"
    # should a later step fail, the node must not stay taken for the scenarios after this one
    request.addfinalizer(lambda: end_preemption(cluster, transport))
    disrupt(cluster, transport, tier, "preempted")  # bench.faults' preemption: a vasp job takes the node whole
    jobs = {t.name: (registered(cluster, transport, t) or {}).get("job_id") for t in slurm_tiers(cluster)}
    context.update(tier=tier, node=record["nodes"], host=record["host"], started=time.monotonic(), jobs=jobs)


@then("the tier's job leaves its node, its endpoint leaves the gateway, and a client is held, then answered or told "
      "503 with Retry-After")
def _job_left(cluster, transport, context, measured):
    """Issue 46: while the job is away the gateway holds a request (at most the tier's hold) instead of failing it:
    answered when the new job serves within the hold, else 503 with Retry-After once the hold has passed."""
    tier = context["tier"]
    plan = plan_tier(cluster, tier)
    load = predict_load(cluster, tier, plan)
    # while its job is away the new job is waited for (the crash's hold where the job never moves)
    hold = new_job_hold_s(cluster, tier, plan) or hold_s(cluster, tier, plan)
    retry_after = str(whole_s(load.new_job_recovery_s if load.new_job_recovery_s is not None else load.recovery_s))
    deadline = time.monotonic() + tier.slurm.grace_seconds + 30
    # requeued (PENDING) or cancelled and submitted again by the keeper: either way the record goes first
    while registered(cluster, transport, tier) is not None:
        if time.monotonic() > deadline:
            pytest.fail(f"tier {tier.name}: its endpoint record is still there, job "
                        f"{job_state(cluster, transport, tier)}")
        time.sleep(0.25)
    context["left"] = time.monotonic()
    started = time.monotonic()
    try:
        response = httpx.get(through_gateway(cluster, tier, False) + "/health", timeout=hold + 15)
    except httpx.HTTPError as exc:
        pytest.fail(f"tier {tier.name}: a request while its job was away failed: {exc!r}")
    waited, state = time.monotonic() - started, job_state(cluster, transport, tier)
    code, header = response.status_code, response.headers.get("retry-after")
    if code == 200:
        measured(f"{tier.name} while its job is away, the gateway", f"held a request {waited:.0f} s, then it was "
                 f"answered (job {state})")
        return
    assert code == 503 and header == retry_after and waited >= hold - 1, (
        f"tier {tier.name}: expected a request held {hold} s, then 503 with Retry-After: {retry_after}; got "
        f"{code} (Retry-After: {header}) after {waited:.1f} s, job {state}")
    measured(f"{tier.name} while its job is away, the gateway",
             f"held a request {waited:.0f} s (its hold), then 503, Retry-After: {header} (job {state})")


@then("the tier answers through the gateway again before its down alert fires, on another node")
def _back_elsewhere(cluster, transport, context, measured):
    tier = context["tier"]
    limit = alert_window(cluster, tier)  # a preempted job is requeued: its hold, a start elsewhere, a load
    url = through_gateway(cluster, tier)
    deadline = context["started"] + max(limit * 2, 300)
    while time.monotonic() < deadline:
        try:
            probes.ask(url, tier, probes.api_key(transport, cluster, tier), timeout=20)
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
    end_preemption(cluster, transport)
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


@when("the job of every SLURM tier is cancelled with scancel")
def _scancel(cluster, transport, context):
    for tier in slurm_tiers(cluster):
        result = transport.run(controller(cluster), slurmjob.jobs(cluster, tier, "cancel"))
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

    tier = tiers[0]
    before = job_restarts(cluster, transport, tier)
    disrupt(cluster, transport, tier, "worker killed")  # pkill of the worker step; fails if there is none to kill
    context.update(tier=tier, node=tier.workers[0], started=time.monotonic(), requeues_before=before)


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

