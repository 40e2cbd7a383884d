"""Monitoring files from the cluster: Prometheus's scrape configuration (every node's exporter, every tier's
llama-server; a SLURM tier through the endpoint registry), alert rules derived from the targets, and promtool unit
tests that prove each alert fires past its threshold and stays quiet inside it."""

from __future__ import annotations

import posixpath

import yaml

from clusterbook.model.schema import Cluster, RouterTier, RpcTier
from clusterbook.pure import topology as topo

PROMETHEUS_DIR = "/etc/prometheus"
RULES = "rules/clusterbook.rules.yml"  # relative to the configuration: promtool resolves it the same way
RULE_TESTS = "rules/clusterbook.rules.test.yml"
SD_DIR = "/etc/prometheus/clusterbook"  # file_sd targets of the SLURM tiers, written from the endpoint registry
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # the node exporter's textfile collector (Debian's default)
GPU_METRICS = "clusterbook_gpu"

# a tier's decode speed over the last 5 minutes: generated tokens per second of generation time (llama-server's
# counters, --metrics); no series while nothing is generated, so an idle tier never alerts
DECODE = ('rate(llamacpp:tokens_predicted_total{{job="{job}"}}[5m]) / '
          'rate(llamacpp:tokens_predicted_seconds_total{{job="{job}"}}[5m])')


def fresh_up(c: Cluster, job_name: str) -> str:
    """The job's targets that are up by a sample of the last three scrapes. A target that left the configuration
    across a restart of Prometheus gets no staleness marker: its last `up` counts for the 5-minute lookback, and a
    bare `up == 1` would hide a tier that is down behind it."""
    selector = f'up{{job="{job_name}"}}'
    return f"{selector} == 1 and time() - timestamp({selector}) < {3 * c.monitoring.scrape_interval_s:g}"


def job(tier: RouterTier | RpcTier) -> str:
    return f"llama-{tier.name}"


def target_labels(tier: RouterTier | RpcTier) -> list[dict]:
    """The labels of a tier's scrape targets: one target, or in router mode one per model (its metrics come from
    the model's own server: `?model=ID`)."""
    if isinstance(tier, RouterTier):
        return [{"__param_model": m, "model": m} for m in tier.models]
    return [{}]


def _dump(header: str, data: dict) -> str:
    return f"# {header}\n" + yaml.safe_dump(data, sort_keys=False, width=120)


def prometheus_config(c: Cluster, header: str) -> str:
    """prometheus.yml: the node exporters, each tier's llama-server, the rules and Alertmanager."""
    m = c.monitoring
    scrape = [{"job_name": "node", "static_configs": [
        {"targets": [f"{topo.address(c, n.name)}:{m.node_exporter_port}"], "labels": {"node": n.name}}
        for n in c.nodes]}]
    for tier in c.tiers:
        entry: dict = {"job_name": job(tier), "metrics_path": "/metrics"}
        if isinstance(tier, RouterTier):  # router mode serves each model's metrics, never loading one for it
            entry["params"] = {"autoload": ["false"]}
        if tier.api_key and tier.api_key.file:  # /metrics needs the key (deploy.monitoring lets Prometheus read it)
            entry["authorization"] = {"type": "Bearer", "credentials_file": tier.api_key.file}
        if tier.manager == "slurm":  # follows the job wherever SLURM runs it
            entry["file_sd_configs"] = [{"files": [posixpath.join(SD_DIR, f"{tier.name}.json")],
                                         "refresh_interval": f"{m.scrape_interval_s}s"}]
        else:
            entry["static_configs"] = [{"targets": [f"{topo.http_address(c, tier)}:{tier.port}"],
                                        "labels": {"tier": tier.name, "node": tier.nodes[0], **labels}}
                                       for labels in target_labels(tier)]
        scrape.append(entry)
    config = {
        "global": {"scrape_interval": f"{m.scrape_interval_s}s", "evaluation_interval": f"{m.scrape_interval_s}s",
                   "external_labels": {"cluster": c.cluster.name}},
        "rule_files": [RULES],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"localhost:{m.alertmanager_port}"]}]}]},
        "scrape_configs": scrape,
    }
    return _dump(header, config)


def _with_entry(c: Cluster, annotations: dict, trouble: str) -> dict:
    """The annotations, naming the troubleshooting entry when the cluster file has it."""
    ids = {t.id for t in c.troubleshooting}
    return {**annotations, "troubleshooting": trouble} if trouble in ids else annotations


def alerts(c: Cluster) -> list[dict]:
    """One rule per target that Prometheus can see, and a down alert per tier and node."""
    rules = [{"alert": "NodeExporterDown", "expr": 'up{job="node"} == 0', "for": "2m",
              "labels": {"severity": "warning"},
              "annotations": {"summary": "a node exporter does not answer (its node label names the node)"}}]
    for tier in c.tiers:
        targets = c.targets_for(tier.name)
        recovery = targets.recovery_s.critical if targets and targets.recovery_s else 300
        if isinstance(tier, RouterTier):  # a router with no model loaded has no target up, and is not down
            rules += _tier_metric_rules(c, tier, targets)
            continue
        rules.append({"alert": "TierDown", "expr": f"absent({fresh_up(c, job(tier))})", "for": f"{recovery:g}s",
                      "labels": {"severity": "critical", "tier": tier.name},
                      "annotations": _with_entry(c, {"summary": f"tier {tier.name} has not answered for "
                                                                f"{recovery:g} s (its recovery target's critical "
                                                                "level)"},
                                                 "rpc-worker-down" if isinstance(tier, RpcTier)
                                                 else "gateway-connection-refused")})
        rules += _tier_metric_rules(c, tier, targets)
    return rules


def _tier_metric_rules(c: Cluster, tier: RouterTier | RpcTier, targets) -> list[dict]:
    """Decode speed and GPU memory past their critical levels."""
    rules: list[dict] = []
    if targets and targets.decode_tps:
        critical = targets.decode_tps.critical
        rules.append({"alert": "DecodeSlow", "expr": DECODE.format(job=job(tier)) + f" < {critical:g}",
                      "for": "5m", "labels": {"severity": "critical", "tier": tier.name},
                      "annotations": _with_entry(c, {"summary": f"tier {tier.name} decodes below {critical:g} "
                                                                f"tok/s (target {targets.decode_tps.target:g})"},
                                                 "rpc-on-ethernet")})
    if targets and targets.gpu_mem_gib:
        critical = targets.gpu_mem_gib.critical
        nodes = "|".join(tier.nodes)
        rules.append({"alert": "GpuMemoryHigh",
                      "expr": f'{GPU_METRICS}_memory_used_bytes{{node=~"{nodes}"}} / 2^30 > {critical:g}',
                      "for": "5m", "labels": {"severity": "warning", "tier": tier.name},
                      "annotations": _with_entry(c, {"summary": f"a GPU of tier {tier.name} holds more than "
                                                                f"{critical:g} GiB"}, "gpu-memory-or-xid")})
    return rules


def rules_file(c: Cluster, header: str) -> str:
    return _dump(header, {"groups": [{"name": f"clusterbook-{c.cluster.name}", "rules": alerts(c)}]})


def _minutes(duration: str) -> int:
    return max(1, -(-int(float(duration.rstrip("s"))) // 60)) if duration.endswith("s") else int(duration[:-1])


def rule_tests(c: Cluster, header: str) -> str:
    """promtool test rules: each alert fires on a series past its threshold once its `for:` has passed, and not
    on a series inside it."""
    tests = []
    for rule in alerts(c):
        wait = _minutes(rule["for"]) + 2 + (_minutes(f"{3 * c.monitoring.scrape_interval_s}s")
                                            if rule["alert"] == "TierDown" else 0)
        samples = f"{wait + 10}"
        labels = {k: v for k, v in rule["labels"].items()}
        if rule["alert"] == "NodeExporterDown":
            node = c.nodes[0].name
            bad = [{"series": f'up{{job="node", node="{node}"}}', "values": f"0x{samples}"}]
            good = [{"series": f'up{{job="node", node="{node}"}}', "values": f"1x{samples}"}]
            labels["node"] = node
            labels["job"] = "node"
        elif rule["alert"] == "TierDown":
            tier = labels["tier"]
            # down, beside an up target of an earlier configuration whose last sample is still in the lookback
            bad = [{"series": f'up{{job="llama-{tier}"}}', "values": f"0x{samples}"},
                   {"series": f'up{{job="llama-{tier}", instance="left"}}', "values": f"1 _x{samples}"}]
            good = [{"series": f'up{{job="llama-{tier}"}}', "values": f"1x{samples}"}]
        elif rule["alert"] == "DecodeSlow":
            tier = labels["tier"]
            target = c.targets_for(tier).decode_tps
            # one generation second per scrape minute: the rate ratio is the tokens added per minute
            bad, good = ([{"series": f'llamacpp:tokens_predicted_total{{job="llama-{tier}"}}',
                           "values": f"0+{rate:g}x{samples}"},
                          {"series": f'llamacpp:tokens_predicted_seconds_total{{job="llama-{tier}"}}',
                           "values": f"0+1x{samples}"}] for rate in (target.critical / 2, target.target))
            labels["job"] = f"llama-{tier}"
        else:  # GpuMemoryHigh
            tier = c.tier(labels["tier"])
            node = tier.nodes[0]
            gib = c.targets_for(tier.name).gpu_mem_gib
            series = f'{GPU_METRICS}_memory_used_bytes{{node="{node}", gpu="0"}}'
            bad = [{"series": series, "values": f"{int((gib.critical + 1) * 2**30)}x{samples}"}]
            good = [{"series": series, "values": f"{int(gib.target * 2**30)}x{samples}"}]
            labels.update(node=node, gpu="0")
        expected = {"exp_labels": labels, "exp_annotations": rule["annotations"]}
        # every other target is up, so only the alert under test can fire
        healthy = [f'up{{job="{job(t)}"}}' for t in c.tiers] + [f'up{{job="node", node="{n.name}"}}' for n in c.nodes]
        for series, alerts_expected in ((bad, [expected]), (good, [])):
            tested = {s["series"] for s in series}
            baseline = [{"series": h, "values": f"1x{samples}"} for h in healthy if h not in tested]
            tests.append({"interval": "1m", "input_series": series + baseline,
                          "alert_rule_test": [{"eval_time": f"{wait}m", "alertname": rule["alert"],
                                               "exp_alerts": alerts_expected}]})
    return _dump(header, {"rule_files": [posixpath.basename(RULES)], "evaluation_interval": "1m", "tests": tests})


def alertmanager_config(c: Cluster, header: str) -> str:
    """alertmanager.yml: every alert to the cluster's webhook, grouped per alert and tier; none set, a receiver
    with nowhere to send (the alerts show in Alertmanager's web UI)."""
    hook = c.monitoring.alert_webhook
    receiver = {"name": "cluster"}
    if hook:
        receiver["webhook_configs"] = [{"url": hook, "send_resolved": True}]
    return _dump(header, {"route": {"receiver": "cluster", "group_by": ["alertname", "tier"], "group_wait": "30s",
                                    "group_interval": "5m", "repeat_interval": "4h"},
                          "receivers": [receiver]})
