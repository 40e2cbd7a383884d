"""Monitoring files from the cluster: Prometheus's scrape configuration (every node's exporter, every tier's
llama-server; a SLURM tier through the endpoint registry), alert rules derived from the targets, and promtool unit
tests that prove each alert fires past its threshold and stays quiet inside it."""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import yaml

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, Tier
from clusterbook.model.siteschema import ALERT_REPEAT_S
from clusterbook.pure import kinds, slurmjob, troubles
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.layout import RULES, SD_DIR, TEXTFILE_DIR
from clusterbook.pure.planner.residency import plan_residency

GPU_METRICS = "clusterbook_gpu"

# a tier's decode speed over the last 5 minutes: generated tokens per second of generation time (llama-server's
# counters, --metrics); no series while nothing is generated, so an idle tier never alerts
DECODE = ('rate(llamacpp:tokens_predicted_total{{job="{job}"}}[5m]) / '
          'rate(llamacpp:tokens_predicted_seconds_total{{job="{job}"}}[5m])')


PROBE_TEXTFILE = "clusterbook-tiers.prom"  # the tier probe writes it each round; its mtime is the round's age


def fresh(c: Cluster, selector: str, condition: str) -> str:
    """The series of `selector` that meet `condition` by a sample of the last three scrapes. A target that left the
    configuration across a restart of Prometheus (a node exporter's port changed, a SLURM tier moved) gets no
    staleness marker: its last sample counts for the 5-minute lookback, and would fire an alert for a tier that is
    fine, or hide one that is down behind it."""
    return f"({selector} {condition} and time() - timestamp({selector}) < {3 * c.monitoring.scrape_interval_s:g})"


def fresh_up(c: Cluster, job_name: str) -> str:
    """The job's targets that are up by a sample of the last three scrapes."""
    return fresh(c, f'up{{job="{job_name}"}}', "== 1")


def job(tier: Tier) -> str:
    return f"llama-{tier.name}"


def target_labels(tier: Tier) -> list[dict]:
    """The labels of a tier's scrape targets: one target, or in router mode one per model (its metrics come from
    the model's own server: `?model=ID`)."""
    if tier.router_mode:
        return [{"__param_model": m, "model": m} for m in tier.models]
    return [{}]


def probe_config(c: Cluster) -> str:
    """The tier probe's configuration: per tier its URL (a SLURM tier's from its endpoint record, followed only to
    its nodes), key file,
    models, its kind's one short request, SLURM job and how long that may take."""
    tiers = []
    for tier in c.tiers:
        targets = c.targets_for(tier.name)
        ttft = targets.ttft_s.critical if targets and targets.ttft_s else 15
        slurm = tier.manager == "slurm"
        path, body = kinds.of(tier).request("")
        tiers.append({"name": tier.name, "router": tier.router_mode, "models": tier.served_models,
                      "request": {"path": path, "body": body},  # the model's id goes in at each probe
                      "url": None if slurm else topo.endpoint_url(c, tier),
                      "record": posixpath.join(c.storage.endpoint_dir, f"{tier.name}.json") if slurm else None,
                      "hosts": topo.tier_hosts(c, tier) if slurm else None,  # where its record may point
                      "job": {"job": topo.units(tier).job, "user": c.access.user, "nodes": candidate_nodes(c, tier),
                              "marks": {"ids": (slurmjob.marker(c, tier, "ids")
                                                if c.keeper_node == c.monitoring.node else None)}}
                      if slurm else None,
                      "key_file": tier.api_key.file if tier.api_key and tier.api_key.file else None,
                      "timeout_s": max(5, min(2 * ttft, c.monitoring.probe_interval_s - 5))})
    return json.dumps({"textfile": posixpath.join(TEXTFILE_DIR, PROBE_TEXTFILE), "tiers": tiers},
                      indent=2) + "\n"


def _dump(header: str, data: dict) -> str:
    return f"# {header}\n" + yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120)  # libyaml: 8x faster


def prometheus_config(c: Cluster, header: str) -> str:
    """prometheus.yml: the node exporters, each tier's llama-server, the rules and Alertmanager."""
    m = c.monitoring
    scrape = [{"job_name": "node", "static_configs": [
        {"targets": [f"{topo.address(c, n.name)}:{m.node_exporter_port}"], "labels": {"node": n.name}}
        for n in c.nodes]}]
    for tier in c.tiers:
        entry: dict = {"job_name": job(tier), "metrics_path": "/metrics"}
        if tier.router_mode:  # router mode serves each model's metrics, never loading one for it
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
        # 127.0.0.1, not localhost: Prometheus (Go) resolved localhost through DNS in the lab, which has none, and no
        # alert ever reached Alertmanager
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{m.alertmanager_port}"]}]}]},
        "scrape_configs": scrape,
    }
    return _dump(header, config)


def docs_base(c: Cluster) -> str | None:
    """Where the published docs site is: cluster.docs_url, else the gateway's /docs/ (docs.publish)."""
    if c.cluster.docs_url:
        return c.cluster.docs_url.rstrip("/")
    if c.gateway and c.gateway.docs_port and c.gateway.url:
        return f"{c.gateway.url}/docs"
    return None


def _entry(c: Cluster, tier: str | None, trouble: str, *also: str) -> dict:
    """The annotations naming the alert's troubleshooting entries (its first cause, then every other cause the file
    has an entry for, comma-separated; an alert of one tier only that tier's entries, an entry written for every
    tier as that tier's: troubles.py) and linking to the first on the published site (runbook_url, Alertmanager's
    usual name for it); none where the cluster file has no troubleshooting at all. A file that has entries but not
    the first one is refused by `invoke check` (alert_findings)."""
    if not c.troubleshooting:
        return {}
    ids = {t.id for t in c.troubleshooting}
    first = troubles.linked(c, trouble, tier)
    rest = [e for a in also if a in ids and a != trouble for e in troubles.linked(c, a, tier)]
    named = list(dict.fromkeys(first + rest))
    base = docs_base(c)
    linked = base and trouble in ids and first
    return {"troubleshooting": ", ".join(named),
            **({"runbook_url": f"{base}/troubleshooting/#{first[0]}"} if linked else {})}


def entries_of(rule: dict) -> list[str]:
    """The troubleshooting entries an alert rule names, first cause first."""
    return [e for e in rule["annotations"].get("troubleshooting", "").split(", ") if e]


def alert_findings(c: Cluster) -> list[tuple[tuple, str]]:
    """Every alert that points to a troubleshooting entry the cluster file does not have."""
    ids = {t.id for t in troubles.entries(c)}
    missing = {}
    for rule in alerts(c) if c.monitoring else []:
        entry = next(iter(entries_of(rule)), None)
        if entry and entry not in ids:
            missing.setdefault(entry, []).append(rule["alert"] + (f" ({rule['labels']['tier']})"
                                                                   if "tier" in rule["labels"] else ""))
    return [(("troubleshooting",), f"alerts {', '.join(names)} point to the troubleshooting entry '{entry}', which "
                                   "the file does not have: add an entry with that id")
            for entry, names in sorted(missing.items())]


@dataclass(frozen=True)
class Alert:
    """An alert rule with the series its promtool test feeds it: `bad` fires it once its `for:` has passed,
    `good` never does; `labels` are the series' labels the fired alert carries beside the rule's."""

    rule: dict
    bad: list[dict]
    good: list[dict]
    labels: dict = field(default_factory=dict)
    wait_m: int = 0  # minutes beyond `for:` before it fires (a stale sample must first leave the window)
    quiet: tuple = ()  # more series sets on which it must not fire (a tier down by design: released on demand, or
    # waiting while a tier it cannot run beside serves)


def _series(name: str, values: str) -> dict:
    return {"series": name, "values": values}


def _rule(name: str, expr: str, duration: str, severity: str, labels: dict, summary: str, annotations: dict) -> dict:
    return {"alert": name, "expr": expr, "for": duration, "labels": {"severity": severity, **labels},
            "annotations": {"summary": summary, **annotations}}


def alert_cases(c: Cluster) -> list[Alert]:
    """Every alert from the cluster's targets: a node exporter or tier down, a SLURM tier unregistered or pending,
    decode speed, time to first token and GPU memory past their critical levels, GPU Xid errors."""
    n = samples(c)
    node = c.nodes[0].name
    up = f'up{{job="node", node="{node}"}}'
    cases = [Alert(_rule("NodeExporterDown", 'up{job="node"} == 0', "2m", "warning", {},
                         "a node exporter does not answer (its node label names the node)",
                         _entry(c, None, "node-down")),
                   [_series(up, f"0x{n}")], [_series(up, f"1x{n}")], {"node": node, "job": "node"})]
    partners = waits_beside(c)
    for tier in c.tiers:
        cases += _tier_alerts(c, tier, c.targets_for(tier.name), n, partners.get(tier.name, []))
    gpu_nodes = [g.name for g in c.nodes if g.gpus]
    if gpu_nodes:
        xid = f'{GPU_METRICS}_xid_errors_total{{node="{gpu_nodes[0]}"}}'
        cases.append(Alert(_rule("GpuXidError", f"increase({GPU_METRICS}_xid_errors_total[10m]) > 0", "0m",
                                 "critical", {}, "the kernel logged an NVIDIA Xid error in the last 10 minutes "
                                 "(its node label names the node)", _entry(c, None, "gpu-lost", "gpu-memory-or-xid")),
                           [_series(xid, f"0 0 1 1x{n}")], [_series(xid, f"2x{n}")], {"node": gpu_nodes[0]}))
    return cases


def samples(c: Cluster) -> int:
    """Minutes of series each promtool test feeds: past the longest `for:` and the margin after it."""
    windows = [c.recovery_level(t.name).critical for t in c.tiers]
    return _minutes(f"{max(windows):g}s") + _minutes(f"{3 * c.monitoring.scrape_interval_s}s") + 10


def waits_beside(c: Cluster) -> dict[str, list[str]]:
    """Per tier, the tiers the plan says cannot run at the same time as it (planner/residency.py): while one of
    them serves, this one waits in SLURM's queue by design."""
    partners: dict[str, list[str]] = {}
    for e in plan_residency(c, plan_cluster(c)).exclusions:
        partners.setdefault(e.first, []).append(e.second)
        partners.setdefault(e.second, []).append(e.first)
    return partners


def _tier_alerts(c: Cluster, tier: Tier, targets, n: int, partners: list[str]) -> list[Alert]:
    name, label = tier.name, {"tier": tier.name}
    recovery = c.recovery_level(name).critical
    hold = f"{math.ceil(recovery)}s"  # promtool reads whole seconds; 1e+06s it refuses
    own = bool(targets and targets.recovery_s)  # a tier without a recovery target has the default level
    down = (f"tier {name} has not answered for {recovery:g} s ("
            + ("its recovery target's critical level)" if own else "the default recovery level: it has no target)"))
    # every cause of a tier that does not answer: its own crash first, then a job that does not start, a tier on
    # demand that does not come back, a step the kernel killed, a GPU gone
    causes = [entry for entry, when in (("job-not-starting", tier.manager == "slurm"),
                                        ("on-demand-not-serving", bool(tier.on_demand)),
                                        ("worker-oom-killed", tier.manager == "slurm" and bool(tier.workers)),
                                        ("gpu-memory-or-xid", any(c.node(n).gpus for n in tier.nodes))) if when]
    trouble = _entry(c, tier.name, "rpc-worker-down" if tier.workers else "gateway-connection-refused",
                     *causes)
    probe = f'clusterbook_tier_healthy{{tier="{name}"}}'
    # down on purpose, so neither down, unregistered nor pending alerts fire: a tier on demand that the keeper
    # released, and a tier that waits while a tier it cannot run beside serves
    released = f'clusterbook_tier_released{{tier="{name}"}}'
    serving = [f'clusterbook_tier_healthy{{tier="{p}"}}' for p in partners]
    # and a SLURM tier whose job waits for nodes other jobs hold (VASP's on beefcake2: a normal day, issue 64)
    held = [f'clusterbook_tier_waiting_for_nodes{{tier="{name}"}}'] if tier.manager == "slurm" else []
    waiting = "".join(f" unless on() {fresh(c, s, '== 1')}" for s in serving + held)
    unless = (f" unless on() {fresh(c, released, '== 1')}" if tier.on_demand else "") + waiting
    alone = [_series(s, f"0x{n}") for s in serving + held]  # it fires when nothing it waits for holds it

    def while_waiting(bad: list[dict]) -> tuple:  # down while a tier it cannot run beside serves, or VASP's jobs
        return tuple((*bad, _series(s, f"1x{n}")) for s in serving + held)

    def quiet(bad: list[dict]) -> tuple:  # down while released on demand, or while waiting
        return (((*bad, _series(released, f"1x{n}")),) if tier.on_demand else ()) + while_waiting(bad)

    def left(series: str, value: int) -> dict:  # the last sample of a node exporter that left the configuration
        return _series(series.replace("}", ', instance="left"}'), f"{value} _x{n}")

    if tier.router_mode:  # metrics come per loaded model: the probe's /health tells whether it is down
        bad = [_series(probe, f"0x{n}")]
        cases = [Alert(_rule("TierDown", f"{fresh(c, probe, '== 0')}{unless}", hold, "critical", label,
                             down, trouble),
                       bad + alone, [_series(probe, f"1x{n}"), left(probe, 0)], quiet=quiet(bad))]
    else:
        scrape = f'up{{job="{job(tier)}"}}'
        # down, beside an up target of an earlier configuration whose last sample is still in the lookback
        bad = [_series(scrape, f"0x{n}"), _series(f'up{{job="{job(tier)}", instance="left"}}', f"1 _x{n}")]
        cases = [Alert(_rule("TierDown", f"absent({fresh_up(c, job(tier))}){unless}", hold, "critical",
                             label, down, trouble),
                       bad + alone, [_series(scrape, f"1x{n}")],
                       wait_m=_minutes(f"{3 * c.monitoring.scrape_interval_s}s"),
                       quiet=quiet(bad))]
    if tier.manager == "slurm":
        registered, pending = (f'clusterbook_tier_{what}{{tier="{name}"}}' for what in ("registered", "pending"))
        job_name = topo.units(tier).job
        cases += [
            Alert(_rule("EndpointMissing", f"{fresh(c, registered, '== 0')}{unless}", hold, "critical",
                        label, f"tier {name} has had no record in the endpoint registry for {recovery:g} s: its job "
                        "does not run, or has not registered", _entry(c, tier.name, "job-not-starting")),
                  [_series(registered, f"0x{n}"), *alone], [_series(registered, f"1x{n}"), left(registered, 0)],
                  quiet=quiet([_series(registered, f"0x{n}")])),
            Alert(_rule("TierPending", f"{fresh(c, pending, '== 1')}{waiting}", hold, "warning", label,
                        f"SLURM has held tier {name}'s job ({job_name}) pending for {recovery:g} s",
                        _entry(c, tier.name, "job-not-starting")),
                  [_series(pending, f"1x{n}"), *alone], [_series(pending, f"0x{n}"), left(pending, 1)],
                  quiet=while_waiting([_series(pending, f"1x{n}")])),
        ]
        info = f'clusterbook_tier_waiting_info{{tier="{name}"}}'
        shown = {"held_by": "alice (vasp)", "start": "2026-12-05T18:00:05"}  # the probe's labels, for the test
        series = info.replace("}", ", " + ", ".join(f'{k}="{v}"' for k, v in shown.items()) + "}")
        cases.append(Alert(_rule("TierWaitingForNodes", fresh(c, info, "== 1"), "0m", "info", label,
                                 f"tier {name} waits for its nodes while other jobs hold them (its held_by label "
                                 "names their users and partitions, its start label SLURM's estimate): expected "
                                 "where those jobs come first; clients are held or told when to retry",
                                 _entry(c, tier.name, "job-not-starting")),
                           [_series(series, f"1x{n}")], [_series(series, f"0x{n}")], shown))
    if targets and targets.decode_tps:
        critical = targets.decode_tps.critical
        counters = [f'llamacpp:tokens_predicted_total{{job="{job(tier)}"}}',
                    f'llamacpp:tokens_predicted_seconds_total{{job="{job(tier)}"}}']
        # one generation second per scrape minute: the rate ratio is the tokens added per minute
        bad, good = ([_series(counters[0], f"0+{rate:g}x{n}"), _series(counters[1], f"0+1x{n}")]
                     for rate in (critical / 2, targets.decode_tps.target))
        cases.append(Alert(_rule("DecodeSlow", DECODE.format(job=job(tier)) + f" < {critical:g}", "5m", "critical",
                                 label, f"tier {name} decodes below {critical:g} tok/s (target "
                                 f"{targets.decode_tps.target:g})",
                                 _entry(c, tier.name, "rpc-on-ethernet", "gpu-memory-or-xid")
                                 if tier.workers
                                 else _entry(c, tier.name, "gpu-memory-or-xid", "slow-first-response")),
                           bad, good, {"job": job(tier)}))
    if targets and targets.ttft_s:
        critical = targets.ttft_s.critical
        model = tier.served_models[0]
        ttft = f'clusterbook_tier_ttft_seconds{{tier="{name}", model="{model}"}}'
        cases.append(Alert(_rule("FirstTokenSlow", f'clusterbook_tier_ttft_seconds{{tier="{name}"}} > {critical:g}',
                                 "5m", "warning", label, f"tier {name} takes more than {critical:g} s to a first "
                                 f"token (target {targets.ttft_s.target:g} s; the probe's one-token completion)",
                                 _entry(c, tier.name, "slow-first-response")),
                           [_series(ttft, f"{critical * 2:g}x{n}")],
                           [_series(ttft, f"{targets.ttft_s.target:g}x{n}")], {"model": model}))
    if targets and targets.gpu_mem_gib:
        gib = targets.gpu_mem_gib
        first = tier.nodes[0]
        # the tiers' own processes: VASP's on the same GPU (a job that preempted the tier) is not the tier's
        series = f'{GPU_METRICS}_tiers_memory_used_bytes{{node="{first}", gpu="0"}}'
        used = f'{GPU_METRICS}_tiers_memory_used_bytes{{node=~"{"|".join(tier.nodes)}"}}'
        cases.append(Alert(_rule("GpuMemoryHigh", f"{used} / 2^30 > {gib.critical:g}", "5m", "warning", label,
                                 f"the tiers' processes on a GPU of tier {name} hold more than {gib.critical:g} GiB",
                                 _entry(c, tier.name, "gpu-memory-or-xid")),
                           [_series(series, f"{int((gib.critical + 1) * 2**30)}x{n}")],
                           [_series(series, f"{int(gib.target * 2**30)}x{n}")], {"node": first, "gpu": "0"}))
    return cases


def alerts(c: Cluster) -> list[dict]:
    """The alert rules, as Prometheus reads them."""
    return [a.rule for a in alert_cases(c)]


def rules_file(c: Cluster, header: str) -> str:
    return _dump(header, {"groups": [{"name": f"clusterbook-{c.cluster.name}", "rules": alerts(c)}]})


def _minutes(duration: str) -> int:
    return max(1, -(-int(float(duration.rstrip("s"))) // 60)) if duration.endswith("s") else int(duration[:-1])


def rule_tests(c: Cluster, header: str) -> str:
    """promtool test rules: each alert fires on its bad series once its `for:` has passed, and never on its good
    ones; every other target is up meanwhile, so only the alert under test can fire."""
    healthy = ([f'up{{job="{job(t)}"}}' for t in c.tiers if not t.router_mode]
               + [f'clusterbook_tier_healthy{{tier="{t.name}"}}' for t in c.tiers]
               + [f'clusterbook_tier_registered{{tier="{t.name}"}}' for t in c.slurm_tiers]
               + [f'up{{job="node", node="{n.name}"}}' for n in c.nodes])
    tests, n = [], samples(c)
    for case in alert_cases(c):
        wait = _minutes(case.rule["for"]) + 2 + case.wait_m if case.rule["for"] != "0m" else 3
        expected = {"exp_labels": {**case.rule["labels"], **case.labels}, "exp_annotations": case.rule["annotations"]}
        for series, alerts_expected in ((case.bad, [expected]), (case.good, []), *((q, []) for q in case.quiet)):
            series = list(series)
            tested = {s["series"] for s in series}
            baseline = [_series(h, f"1x{n}") for h in healthy if h not in tested]
            tests.append({"interval": "1m", "input_series": series + baseline,
                          "alert_rule_test": [{"eval_time": f"{wait}m", "alertname": case.rule["alert"],
                                               "exp_alerts": alerts_expected}]})
    return _dump(header, {"rule_files": [posixpath.basename(RULES)], "evaluation_interval": "1m", "tests": tests})


def alertmanager_config(c: Cluster, header: str) -> str:
    """alertmanager.yml: every alert to the monitoring node's alert journal (a line in its journal) and to the
    cluster's webhook and e-mail receivers, grouped per alert and tier."""
    hook, mail = c.monitoring.alert_webhook, c.monitoring.alert_email
    local = f"http://127.0.0.1:{c.monitoring.alert_journal_port}/"
    receiver: dict = {"name": "cluster",
                      "webhook_configs": [{"url": url, "send_resolved": True} for url in (local, hook) if url]}
    if mail:
        receiver["email_configs"] = [{"to": ", ".join(mail.to), "from": mail.sender, "smarthost": mail.smarthost,
                                      "require_tls": mail.require_tls, "send_resolved": True}]
    # an informational alert (a tier waiting for VASP's nodes) goes to the journal and the status banner only
    journal = {"name": "journal", "webhook_configs": [{"url": local, "send_resolved": True}]}
    return _dump(header, {"route": {"receiver": "cluster", "group_by": ["alertname", "tier"],
                                    "group_wait": f"{c.monitoring.alert_group_wait_s}s",
                                    "group_interval": f"{c.monitoring.alert_group_interval_s}s",
                                    "repeat_interval": f"{ALERT_REPEAT_S}s",
                                    "routes": [{"matchers": ['severity="info"'], "receiver": "journal"}]},
                          "receivers": [receiver, journal]})


def alert_destinations(c: Cluster) -> list[str]:
    """Where alerts go, in words (empty: nowhere but Alertmanager's web UI). A webhook by its host only: its URL
    often holds a secret token (a chat service's incoming webhook), and the docs site is published."""
    m = c.monitoring
    out = [f"a webhook on {urlsplit(m.alert_webhook).hostname}"] if m and m.alert_webhook else []
    if m and m.alert_email:
        out.append(f"e-mail to {', '.join(m.alert_email.to)} through {m.alert_email.smarthost}")
    return out
