"""The monitoring files: Prometheus, Alertmanager, the alert journal, the probe, the GPU collector, node exporters."""

from __future__ import annotations

import json
import shlex

from clusterbook.model.schema import Cluster
from clusterbook.pure import layout
from clusterbook.pure import topology as topo
from clusterbook.pure.layout import path as at
from clusterbook.pure.render import monitoring as mon
from clusterbook.pure.render.artifact import Artifact, header, node_program, periodic, template
from clusterbook.pure.render.escaping import Quoted
from clusterbook.pure.render.node_config import ALERT_JOURNAL_MEMORY_MIB


def monitoring_files(c: Cluster) -> list[Artifact]:
    """Prometheus's configuration, rules and their tests on the monitoring node; the GPU collector on every GPU
    node; the SLURM tiers' scrape targets from the endpoint registry; journald's size limit everywhere."""
    m = c.monitoring
    h = header(c)
    files = [
        Artifact(m.node, at(c, "prometheus_config"), mon.prometheus_config(c, h), "prometheus",
                 about="monitoring: what Prometheus scrapes", id="prometheus_config"),
        Artifact(m.node, at(c, "rules"), mon.rules_file(c, h), "rules",
                 about="monitoring: alerts from the targets", id="rules"),
        Artifact(m.node, at(c, "rule_tests"), mon.rule_tests(c, h), "rule-tests",
                 about="monitoring: promtool tests of every alert", id="rule_tests"),
        Artifact(m.node, at(c, "alertmanager"), mon.alertmanager_config(c, h), "alertmanager",
                 about="monitoring: where alerts go", id="alertmanager"),
        # both listen on loopback only (issue 65): clusterbook reads them over SSH on this node, an operator through
        # the ssh forward the Monitoring page gives; nothing from another host posts an alert or a silence, and
        # Alertmanager's cluster gossip (9094) is off
        Artifact(m.node, at(c, "prometheus_defaults"),
                 f'# {h}\nARGS="--storage.tsdb.retention.time={m.retention_days}d '
                 f'--web.listen-address=127.0.0.1:{m.port}"\n',
                 "env", about="monitoring: Prometheus's retention and port (loopback)", id="prometheus_defaults"),
        Artifact(m.node, at(c, "alertmanager_defaults"),
                 f'# {h}\nARGS="--web.listen-address=127.0.0.1:{m.alertmanager_port} --cluster.listen-address="\n',
                 "env", about="monitoring: Alertmanager's port (loopback, no cluster gossip)",
                 id="alertmanager_defaults"),
        Artifact(m.node, at(c, "probe_config"), mon.probe_config(c), "json",
                 about="monitoring: which tiers the probe asks, and where", id="probe_config"),
        Artifact(m.node, at(c, "alert_journal"), node_program("alert_journal.py", h), "python",
                 about="monitoring: every alert as a journal line (Alertmanager's local receiver)", id="alert_journal"),
        Artifact(m.node, at(c, "alert_journal_unit"),
                 template("daemon.service.j2", header=h, description=Quoted("clusterbook: every alert in the journal"),
                          command=Quoted(f"/usr/bin/python3 {at(c, 'alert_journal')} {m.alert_journal_port}"),
                          dynamic_user=True, memory_max=f"{ALERT_JOURNAL_MEMORY_MIB}M", tasks_max=64),
                 "unit", about="monitoring: the alert journal's service", id="alert_journal_unit"),
    ]
    files += periodic(c, m.node, "probe", node_program("tier_probe.py", h),
                       Quoted(f"{at(c, 'probe')} {at(c, 'probe_config')}"), "ask every tier as a client does",
                       m.probe_interval_s, f"ask every tier every {m.probe_interval_s} s",
                       "monitoring: each tier's health and time to first token -> node exporter textfile",
                       "monitoring: tier probe", kind="python")
    for node in (n.name for n in c.nodes if n.gpus):
        files += periodic(c, node, "gpu_metrics",
                           template("gpu-metrics.sh.j2", header=h, textfile_dir=layout.TEXTFILE_DIR,
                                    prefix=mon.GPU_METRICS,
                                    binaries=[c.engine.server_binary, c.engine.rpc_worker_binary]),
                           at(c, "gpu_metrics"),
                           "GPU figures for the node exporter", m.scrape_interval_s,
                           f"GPU figures every {m.scrape_interval_s} s",
                           "monitoring: nvidia-smi -> node exporter textfile", "monitoring: GPU collector")
    # model ids are Names (letters, digits, . _ -): their JSON array is safe inside the script's single quotes
    slurm = [{"name": t.name, "models": Quoted(json.dumps(t.models)) if t.router_mode else None,
              "hosts": " ".join(topo.tier_hosts(c, t))} for t in c.slurm_tiers]
    if slurm:
        files += periodic(c, m.node, "scrape_targets",
                           template("scrape-targets.sh.j2", header=h, sd_dir=layout.SD_DIR,
                                    endpoint_dir=c.storage.endpoint_dir, tiers=slurm), at(c, "scrape_targets"),
                           "Prometheus targets of the SLURM tiers", m.scrape_interval_s,
                           f"targets of the SLURM tiers every {m.scrape_interval_s} s",
                           "monitoring: endpoint registry -> Prometheus targets", "monitoring: scrape targets")
    if c.node(m.node).os.family == "el":
        files += monitoring_releases(c, h)
    for node in (n for n in c.nodes if n.os.family == "debian"):  # the package's unit reads its ARGS here
        files.append(Artifact(node.name, at(c, "node_exporter_defaults"),
                              f'# {h}\nARGS="--web.listen-address={topo.address(c, node.name)}:{m.node_exporter_port} '
                              f'--collector.textfile.directory={layout.TEXTFILE_DIR}"\n', "env",
                              about="monitoring: the node exporter's port, on the management address (Debian)",
                              id="node_exporter_defaults"))
    for node in (n for n in c.nodes if n.os.family == "el"):  # EPEL's exporter, clusterbook's unit and firewall rule
        command = Quoted(f"{layout.NODE_EXPORTER_EL} --web.listen-address={topo.address(c, node.name)}:"
                         f"{m.node_exporter_port} "
                         f"--collector.textfile.directory={layout.TEXTFILE_DIR}")
        files.append(Artifact(node.name, at(c, "node_exporter_unit"),
                              template("daemon.service.j2", header=h, command=command,
                                       description=Quoted("clusterbook: Prometheus node exporter (EPEL's binary)")),
                              "unit", about="monitoring: the node exporter (EL)", id="node_exporter_unit"))
        rules = [{"port": m.node_exporter_port, "sources": [topo.address(c, m.node)]}]
        files.append(Artifact(node.name, at(c, "exporter_firewalld"),
                              template("firewalld-open.sh.j2", header=h, network=c.management_network,
                                       address=topo.address(c, node.name), rules=rules,
                                       what=f"Prometheus on {m.node} may scrape the node exporter here."),
                              "script", 0o755, about="monitoring: the node exporter's port open to Prometheus "
                                                     "(firewalld)", id="exporter_firewalld"))
    for node in c.nodes:
        files.append(Artifact(node.name, at(c, "journald"),
                              f"# {h}\n[Journal]\nSystemMaxUse={m.journald_max_use}\n", "ini",
                              about="monitoring: journald's size limit for the services' logs", id="journald"))
    return files


def monitoring_releases(c: Cluster, h: Quoted) -> list[Artifact]:
    """An EL monitoring node's Prometheus and Alertmanager: the release tarballs' installer and their units, named as
    Debian's packages name theirs and reading the same /etc/default files."""
    m, r = c.monitoring, c.monitoring.el_releases
    releases = {name: {"url": Quoted(shlex.quote(rel.url)), "sha256": rel.sha256}
                for name, rel in (("prometheus", r.prometheus), ("alertmanager", r.alertmanager))}
    script = template("monitoring-releases.sh.j2", header=h, opt=layout.RELEASES_DIR, cache=layout.RELEASES_CACHE,
                      data=[layout.PROMETHEUS_DATA, layout.ALERTMANAGER_DATA], **releases)
    home = {name: f"{layout.RELEASES_DIR}/{name}-{rel['sha256'][:12]}" for name, rel in releases.items()}
    prometheus = Quoted(f"{home['prometheus']}/prometheus --config.file={at(c, 'prometheus_config')} "
                        f"--storage.tsdb.path={layout.PROMETHEUS_DATA}/ $ARGS")
    alertmanager = Quoted(f"{home['alertmanager']}/alertmanager --config.file={at(c, 'alertmanager')} "
                          f"--storage.path={layout.ALERTMANAGER_DATA}/ $ARGS")
    return [
        Artifact(m.node, at(c, "monitoring_releases"), script, "script", 0o755, id="monitoring_releases",
                 about="monitoring: Prometheus and Alertmanager from their release tarballs (EL)"),
        Artifact(m.node, at(c, "prometheus_unit"),
                 template("daemon.service.j2", header=h, command=prometheus, user="prometheus",
                          env_file=at(c, "prometheus_defaults"),
                          description=Quoted("clusterbook: Prometheus (release tarball)")),
                 "unit", about="monitoring: Prometheus's unit (EL)", id="prometheus_unit"),
        Artifact(m.node, at(c, "alertmanager_unit"),
                 template("daemon.service.j2", header=h, command=alertmanager, user="prometheus",
                          env_file=at(c, "alertmanager_defaults"),
                          description=Quoted("clusterbook: Alertmanager (release tarball)")),
                 "unit", about="monitoring: Alertmanager's unit (EL)", id="alertmanager_unit"),
    ]
