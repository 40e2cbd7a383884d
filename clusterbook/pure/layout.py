"""Where every generated file lives on a node: one home per path, named by an artifact id that runbooks use."""

from __future__ import annotations

import posixpath

from clusterbook.model.schema import Cluster, RouterTier, Tier
from clusterbook.pure import topology as topo
from clusterbook.pure.engine_build import plan_build

SYSTEMD_DIR = "/etc/systemd/system"
SBIN = "/usr/local/sbin"
LIB = "/usr/local/lib/clusterbook"  # node programs others import (hold.py, hold_streams.py, slurm_jobs.py)
PROMETHEUS_DIR = "/etc/prometheus"
RULES = "rules/clusterbook.rules.yml"  # relative to the configuration: promtool resolves it the same way
RULE_TESTS = "rules/clusterbook.rules.test.yml"
SD_DIR = f"{PROMETHEUS_DIR}/clusterbook"  # file_sd targets of the SLURM tiers, written from the endpoint registry
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # the node exporter's textfile collector (Debian's default)
NODE_EXPORTER_EL = "/usr/bin/node_exporter"  # EPEL's golang-github-prometheus-node-exporter installs it here
NGINX_SITE = "/etc/nginx/sites-available/clusterbook.conf"
NGINX_SITE_ENABLED = "/etc/nginx/sites-enabled/clusterbook.conf"
NGINX_SITE_EL = "/etc/nginx/conf.d/clusterbook.conf"  # EL's nginx reads conf.d only (no sites-enabled)
RELEASES_DIR = "/opt/clusterbook/monitoring"  # EL monitoring node: Prometheus and Alertmanager, one folder per sum
RELEASES_CACHE = "/var/cache/clusterbook/monitoring"  # their downloaded tarballs
PROMETHEUS_DATA = "/var/lib/prometheus/metrics2"  # Debian's storage paths, kept on EL so both read alike
ALERTMANAGER_DATA = "/var/lib/prometheus/alertmanager"
DEMAND_DIR = "/var/lib/clusterbook/demand"  # on the controller: the marks the hold service writes (wanted, released,
# request), group-writable by HOLD_USER; the keeper's other marks and the batch scripts stay root's (keeper_marker_dir)
HOLD_USER = "clusterbook-hold"  # the hold and wake service's own unprivileged user (and group)


def unit_file(name: str, suffix: str = "service") -> str:
    return f"{SYSTEMD_DIR}/{name}.{suffix}"


def _timer(ids: str, name: str, script: str | None = None) -> dict[str, str]:
    """A periodic job's three files: its script (unless given), service and timer."""
    return {ids: script or f"{SBIN}/{name}", f"{ids}_service": unit_file(name),
            f"{ids}_timer": unit_file(name, "timer")}


def cluster_paths(c: Cluster) -> dict[str, str]:
    """Every cluster-wide generated file by artifact id (the same path on every node that gets it)."""
    paths = {
        "gguf_check": f"{SBIN}/clusterbook-gguf-check",
        "journald": "/etc/systemd/journald.conf.d/clusterbook.conf",
        "slurm_conf": "/etc/slurm/slurm.conf",
        "slurm_state_dir": "/var/lib/slurm/slurmctld",
        "slurmd_spool_dir": "/var/lib/slurm/slurmd",
        "slurm_log_dir": "/var/log/slurm",
        "prometheus_defaults": "/etc/default/prometheus",
        "alertmanager_defaults": "/etc/default/prometheus-alertmanager",
        "node_exporter_defaults": "/etc/default/prometheus-node-exporter",  # Debian: the package's unit reads it
        # EL monitoring node: the release tarballs' installer, and units named as Debian's packages name theirs
        "monitoring_releases": f"{SBIN}/clusterbook-monitoring-releases",
        "prometheus_unit": unit_file("prometheus"),
        "alertmanager_unit": unit_file("prometheus-alertmanager"),
        "prometheus_config": f"{PROMETHEUS_DIR}/prometheus.yml",
        "rules": f"{PROMETHEUS_DIR}/{RULES}",
        "rule_tests": f"{PROMETHEUS_DIR}/{RULE_TESTS}",
        "alertmanager": f"{PROMETHEUS_DIR}/alertmanager.yml",
        "probe_config": f"{PROMETHEUS_DIR}/clusterbook-tier-probe.json",
        "nginx_site": NGINX_SITE_EL if c.gateway and _family(c, c.gateway.node) == "el" else NGINX_SITE,
        "nginx_site_enabled": NGINX_SITE_ENABLED,
        "nginx_selinux": f"{SBIN}/clusterbook-nginx-selinux",  # EL gateway: SELinux lets nginx listen and proxy
        "tailscale_serve": f"{SBIN}/clusterbook-tailscale-serve",
        "keeper_dir": keeper_marker_dir(c),
        "demand_dir": DEMAND_DIR,
        **_timer("probe", "clusterbook-tier-probe"),
        **_timer("gpu_metrics", "clusterbook-gpu-metrics"),
        **_timer("scrape_targets", "clusterbook-scrape-targets"),
        **_timer("keeper", "clusterbook-keeper"),
        "keeper_path": unit_file("clusterbook-keeper", "path"),  # runs it at once when a tier on demand is woken
        "keeper_config": "/etc/clusterbook/keeper.json",
        "slurm_jobs": f"{LIB}/slurm_jobs.py",  # the SLURM tiers' own jobs: the keeper, wake and probe import it
        "jobs": f"{SBIN}/clusterbook-jobs",  # ... and the runbooks run it through this command (its configuration)
        "legacy": f"{SBIN}/clusterbook-legacy",  # stop.legacy's record of what ran before; restore.legacy's way back
        **_timer("updater", "clusterbook-upstreams"),
        "alert_journal": f"{SBIN}/clusterbook-alert-journal",
        "alert_journal_unit": unit_file("clusterbook-alert-journal"),
        "wake": f"{SBIN}/clusterbook-wake",
        "hold": f"{LIB}/hold.py",  # the wake service imports it from there (node/wake.py)
        "hold_streams": f"{LIB}/hold_streams.py",  # ... and hold.py this, from beside it
        "wake_config": "/etc/clusterbook/wake.json",
        "wake_unit": unit_file("clusterbook-wake"),
        "node_exporter_unit": unit_file("clusterbook-node-exporter"),  # EL: its package's unit name varies
        "exporter_firewalld": f"{SBIN}/clusterbook-exporter-firewalld",
    }
    if c.router:
        paths["selector"] = c.router.script
    if c.gateway:
        paths["site_archive"] = posixpath.join(c.gateway.docs_dir, "site.tar.gz.b64")
    if c.engine.patches:  # beside the source it patches
        paths["engine_patches"] = posixpath.join(plan_build(c).root, "patches.diff")
    return paths


def _family(c: Cluster, node: str) -> str:
    """A node's OS family (debian where the file names no such node: its checks report that)."""
    return next((n.os.family for n in c.nodes if n.name == node), "debian")


def tier_paths(c: Cluster, tier: Tier) -> dict[str, str]:
    """Every generated file of one tier by artifact id."""
    names = topo.units(tier)
    paths = {"env": env_file(c, tier), "head_unit": unit_file(names.head), "sbatch": sbatch_path(c, tier)}
    if tier.router_mode:
        paths["models_preset"] = models_preset_path(c, tier)
    if tier.workers:
        paths |= {"worker_unit": unit_file(names.worker), "rpc_rules": f"/etc/nftables.d/llama-rpc-{tier.name}.nft",
                  "firewall_unit": unit_file(names.firewall),
                  "firewalld_script": f"{SBIN}/clusterbook-rpc-firewalld-{tier.name}"}
    paths["http_firewalld"] = f"{SBIN}/clusterbook-http-firewalld-{tier.name}"  # EL nodes that may serve its API
    if c.gateway:
        paths["upstream"] = posixpath.join(c.gateway.upstream_dir, f"{tier.name}.conf")
    return paths


def path(c: Cluster, artifact_id: str, tier: Tier | None = None) -> str:
    """The node path of one artifact id (a tier's own files need the tier)."""
    return (tier_paths(c, tier) if tier is not None else {}).get(artifact_id) or cluster_paths(c)[artifact_id]


def env_file(c: Cluster, tier: Tier) -> str:
    return posixpath.join(c.storage.env_dir, f"{tier.name}.env")


def secrets_file(c: Cluster, tier: Tier) -> str | None:
    """Where an env-referenced API key is kept on the node (written by the operator, never rendered)."""
    if tier.api_key and tier.api_key.env:
        return posixpath.join(c.storage.env_dir, f"{tier.name}.secrets")
    return None


def models_preset_path(c: Cluster, tier: RouterTier) -> str:
    return posixpath.join(c.storage.env_dir, f"{tier.name}-models.ini")


def keeper_marker_dir(c: Cluster) -> str:
    """Where deploy marks a SLURM tier as wanted and stop unmarks it (the keeper reads it)."""
    return posixpath.join(c.storage.env_dir, "slurm")


CHANGING_DIR = "/run/clusterbook-hold"  # on the gateway node: <tier>.changing while apply or rollback changes it


def changing_mark(tier: Tier) -> str:
    """The gateway's mark that an apply or a rollback is changing the tier: it holds the node-clock second until
    which the hold waits for the tier (effects/change_hold.py writes it, the wake service reads it)."""
    return posixpath.join(CHANGING_DIR, f"{tier.name}.changing")


def sbatch_path(c: Cluster, tier: Tier) -> str:
    return posixpath.join(keeper_marker_dir(c), f"{topo.units(tier).job}.sbatch")
