"""Steps of monitoring.feature: Prometheus scrapes, the probe, counters and the tier-down alert."""

import json
import re
import time

import pytest
from pytest_bdd import then, when

from clusterbook.acceptance.steps.helpers import alert_firing, monitored, probed, rpc_tiers, run_invoke, url_of
from clusterbook.effects import probes
from clusterbook.pure import topology as topo
from clusterbook.pure.render.monitoring import job


@then("every node exporter and every RPC tier's server is up in Prometheus")
def _scraped(cluster, transport, measured):
    monitored(cluster)

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
    since = transport.run(cluster.monitoring.node, "date +%s").stdout.strip()  # the journal's clock
    result = run_invoke(cluster_file, f"stop.{tier.name}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    measured(f"{tier.name} stop command s", round(time.monotonic() - started, 1))
    context.update(tier=tier, window=window)
    try:
        limit = window + 4 * cluster.monitoring.scrape_interval_s + 60
        while time.monotonic() - started < limit and not alert_firing(cluster, transport, tier):
            if probed(cluster, transport, "clusterbook_tier_healthy").get(tier.name) == "0":
                context["probe_saw_down"] = True
            time.sleep(1)  # two queries over SSH's open connection: read as soon as it fires
        context["fired_after"] = time.monotonic() - started if alert_firing(cluster, transport, tier) else None
        if context["fired_after"] is not None:  # what the person on call sees first (issue 47)
            context["status"] = run_invoke(cluster_file, "status").stdout
            context["journal"] = alert_journal_line(cluster, transport, tier, since)
            context["site_status"] = site_status(cluster, transport)
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


@then("invoke status listed the firing alert while the tier was down")
def _status_listed(context):
    tier, shown = context["tier"], " ".join(context.get("status", "").split())
    assert "alerts, from Prometheus" in shown and "TierDown" in shown and "firing" in shown, \
        f"tier {tier.name}: invoke status did not list TierDown while it fired:\n{context.get('status', '')[-3000:]}"
    assert re.search(rf"TierDown\s*│\s*firing\s*│[^│]*│\s*{re.escape(tier.name)}\b", context["status"]), \
        context["status"][-3000:]


def alert_journal_line(cluster, transport, tier, since: str) -> str:
    """The alert journal's line for the tier's TierDown since the node's clock read `since`, once Alertmanager has
    gathered it (its group wait and a few scrapes); empty when none came."""
    command = (f"journalctl -u clusterbook-alert-journal --since @{since} -o cat --no-pager "
               f"| grep -F 'FIRING TierDown tier={tier.name} ' | tail -n 1")
    m = cluster.monitoring  # a new group waits group_wait; an alert of a group notified before, group_interval
    deadline = time.monotonic() + max(m.alert_group_wait_s, m.alert_group_interval_s) + 4 * m.scrape_interval_s + 20
    while time.monotonic() < deadline:
        line = transport.run(cluster.monitoring.node, command).stdout.strip()
        if line:
            return line
        time.sleep(2)
    return ""


def site_status(cluster, transport) -> str:
    """What the site's status banner read: status.json through nginx where the site is published on the monitoring
    node, else the alert receiver's own /alerts there (what nginx would pass on)."""
    gw, m = cluster.gateway, cluster.monitoring
    if topo.site_status_url(cluster):
        return transport.run(gw.node, f"curl -sS -m 5 http://{gw.listen[0]}:{gw.docs_port}/status.json").stdout
    return transport.run(m.node, f"curl -sS -m 5 http://127.0.0.1:{m.alert_journal_port}/alerts").stdout


@then("the site's status banner listed the alert while the tier was down")
def _banner_listed(context):
    tier, shown = context["tier"], context.get("site_status", "")
    try:
        firing = json.loads(shown)["firing"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"the site's status was not the alert receiver's JSON: {shown[:300]!r}") from None
    assert any(a["alert"] == "TierDown" and a["tier"] == tier.name and a["severity"] == "critical" for a in firing), \
        f"tier {tier.name}: the site's status did not list its TierDown: {firing}"


@then("the monitoring node's journal had the alert as a line at its severity while the tier was down")
def _journal_had(cluster, transport, context):
    tier, line = context["tier"], context.get("journal", "")
    assert line, f"tier {tier.name}: no 'FIRING TierDown tier={tier.name}' in clusterbook-alert-journal's journal"
    assert "severity=critical" in line and ("troubleshooting:" in line or not cluster.troubleshooting), line
    priority = transport.run(cluster.monitoring.node, "journalctl -u clusterbook-alert-journal -o json -n 50 "
                             f"--no-pager | grep -F 'FIRING TierDown tier={tier.name} ' | tail -n 1").stdout
    assert '"PRIORITY":"2"' in priority, priority[-500:]  # critical: the journal's priority, not only the text


@then("the alert fired once its for window had passed, and resolves after the tier is deployed again")
def _alert_cycle(cluster, transport, context, measured):
    tier, window, fired = context["tier"], context["window"], context["fired_after"]
    assert fired is not None, f"tier {tier.name}: TierDown did not fire within {window:g} s and the scrapes after"
    assert fired >= window, (f"tier {tier.name}: TierDown fired {fired:.0f} s after the stop began, before its "
                             f"{window:g} s window")
    deadline = context["back"] + 4 * cluster.monitoring.scrape_interval_s + 30
    while time.monotonic() < deadline and alert_firing(cluster, transport, tier):
        time.sleep(1)
    assert not alert_firing(cluster, transport, tier), f"tier {tier.name}: TierDown still fires after redeploy"
    measured(f"{tier.name} TierDown resolved after redeploy s", round(time.monotonic() - context["back"], 1))

