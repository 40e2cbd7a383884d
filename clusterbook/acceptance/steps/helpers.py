"""What the acceptance steps share: the tiers, endpoints and waits they look at, each from the cluster file."""

import json
import re
import time

import httpx
import pytest

from clusterbook.adapters.command_line import run_line
from clusterbook.adapters.tasks import program
from clusterbook.effects import probes
from clusterbook.effects.lab.machines import Machine
from clusterbook.model.loader import load_cluster
from clusterbook.pure import slurmjob
from clusterbook.pure import topology as topo


def rpc_tiers(cluster, manager=None, among=None):
    """The RPC tiers (of one manager), among the tiers under test when given."""
    return [t for t in cluster.tiers if t.workers and manager in (None, t.manager)
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
    """Seconds until the tier answers its kind's request (polling), or fail after deadline_s."""
    started = time.monotonic()
    key = probes.api_key(transport, cluster, tier)
    last = ""
    while time.monotonic() - started < deadline_s:
        try:
            probes.ask(url_of(cluster, transport, tier), tier, key, timeout=30)
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


def run_invoke(cluster_file, *argv, timeout=600):
    """A task of this cluster as an operator runs it (`clusterbook TASK --cluster F`), in this process, from the
    folder verify runs in (the cluster file's paths and the operator's files are relative to it); fails the step
    with its output if it fails or runs past `timeout`."""
    run = run_line(program, ["clusterbook", *argv, "--cluster", str(cluster_file)], timeout=timeout)
    assert run.returncode == 0, f"invoke {' '.join(argv)}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return run


def slurm_tiers(cluster):
    tiers = [t for t in cluster.tiers if t.manager == "slurm"]
    if not tiers:
        pytest.skip("no tier runs under SLURM in this cluster file")
    return tiers


def gateway_base(cluster):
    if not cluster.gateway:
        pytest.skip("no gateway in this cluster file")
    return cluster.gateway.listen[0]


def waiting_tiers(cluster, transport) -> dict[str, str]:
    """Per SLURM tier whose own job waits for nodes other jobs hold (VASP's), why (clusterbook-jobs waiting)."""
    out = {}
    for tier in (t for t in cluster.tiers if t.manager == "slurm"):
        said = transport.run(controller(cluster), slurmjob.jobs(cluster, tier, "waiting"), timeout=30)
        if said.ok and said.stdout.strip():
            out[tier.name] = said.stdout.strip()
    return out


def job_state(cluster, transport, tier) -> str:
    out = transport.run(controller(cluster), slurmjob.jobs(cluster, tier, "squeue", "-o", "'%T %N'")).stdout.strip()
    return out or "none"


def through_gateway(cluster, tier, path_port: bool = True) -> str:
    route = next(r for r in cluster.gateway.routes if r.tier == tier.name)
    if path_port and cluster.gateway.path_port:
        return f"http://{gateway_base(cluster)}:{cluster.gateway.path_port}{route.path.rstrip('/')}"
    return f"http://{gateway_base(cluster)}:{route.port}"


def answers_through_gateway(cluster, transport, tier, since: float, after: str, limit: float | None = None) -> float:
    """Seconds from `since` until the tier answers its kind's request through the gateway; fails past `limit`
    (the tier's recovery target unless given)."""
    limit = recovery_target(cluster, tier) if limit is None else limit
    url, last = through_gateway(cluster, tier), ""
    while time.monotonic() - since < limit:
        try:
            probes.ask(url, tier, probes.api_key(transport, cluster, tier), timeout=20)
            return round(time.monotonic() - since, 1)
        except httpx.HTTPError as exc:
            last = str(exc)
            time.sleep(2)
    pytest.fail(f"tier {tier.name}: expected to answer through the gateway within {limit:g} s {after} "
                f"(last error: {last})")


def job_restarts(cluster, transport, tier) -> tuple[str, int]:
    """The tier's running job and how often SLURM has requeued it (scontrol's Restarts=)."""
    job = transport.run(controller(cluster), slurmjob.jobs(cluster, tier, "squeue", "-t", "RUNNING")).stdout.split()
    assert job, f"tier {tier.name}: no running job ({job_state(cluster, transport, tier)})"
    shown = transport.run(controller(cluster), f"scontrol show job {job[0]}").stdout
    found = re.search(r"\bRestarts=(\d+)", shown)
    assert found, f"tier {tier.name}: no Restarts= in scontrol show job {job[0]}:\n{shown}"
    return job[0], int(found.group(1))


def monitored(cluster):
    if not cluster.monitoring:
        pytest.skip("no monitoring section in this cluster file")
    return cluster.monitoring


def alert_firing(cluster, transport, tier) -> bool:
    return bool(probes.prometheus_query(
        transport, cluster, f'ALERTS{{alertname="TierDown", tier="{tier.name}", alertstate="firing"}}'))


def probed(cluster, transport, metric: str) -> dict[str, str]:
    """The tier probe's latest figure of each tier, from Prometheus: as the monitoring node's node exporter serves
    it now (the exporter of an earlier configuration, on another port, keeps its last sample for Prometheus's
    5-minute lookback: another lab file's tiers, down when that file's tests ended)."""
    exporter = f"{topo.address(cluster, cluster.monitoring.node)}:{cluster.monitoring.node_exporter_port}"
    return {s["metric"]["tier"]: s["value"][1] for s in probes.prometheus_query(transport, cluster, metric)
            if s["metric"].get("instance") == exporter}


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
    out = transport.run(controller(cluster) or cluster.keeper_node, slurmjob.jobs(cluster, tier, "squeue"))
    return set(out.stdout.split())


def cold_request(cluster, transport, tier, timeout: float) -> tuple[float, int, dict]:
    """One chat completion through the gateway to a released tier: (seconds, HTTP status, headers)."""
    key = probes.api_key(transport, cluster, tier)
    started = time.monotonic()
    response = httpx.post(f"{through_gateway(cluster, tier, False)}/v1/chat/completions", timeout=timeout,
                          headers={"Authorization": f"Bearer {key}"} if key else {},
                          json={"model": tier.served_models[0], "max_tokens": 4,
                                "messages": [{"role": "user", "content": "Say OK."}]})
    return time.monotonic() - started, response.status_code, dict(response.headers)


def is_lab(path: str) -> bool:
    """The cluster file describes a running lab: every node is a lab machine of this host (whatever the file's
    path: a test's modified copy of lab/cluster.yaml is the same lab)."""
    cluster = load_cluster(path)
    return all(Machine(cluster.cluster.name, node.name).running for node in cluster.nodes)
