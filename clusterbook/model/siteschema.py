"""The site around the tiers: SLURM (run by clusterbook or by the site), alerts and monitoring, the
planner's measured figures."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
)

from clusterbook.model.measured import PLANNER
from clusterbook.model.schemabase import Port, Strict
from clusterbook.model.valuetypes import (
    Email,
    HostPort,
    Line,
    Name,
    SlurmName,
    Url,
)

# SLURM's own default for AuthInfo=cred_expire (slurm.conf(5)): a requeued job (preemption, node failure, a
# killed step) is held this long before it may start again, which dominates a SLURM tier's recovery
SLURM_REQUEUE_HOLD_S = 120


# SchedulerParameters=batch_sched_delay's default: slurmctld starts no batch job within this many seconds of its last
# scheduling pass (slurm-wlm 22.05's controller.c; planner/loadtime.py tells what it adds to a tier's start)
SLURM_BATCH_SCHED_DELAY_S = 3


class SlurmPartition(Strict):
    """A partition of a SLURM cluster that clusterbook configures."""

    name: Name = Field(description="partition name")
    nodes: list[Name] = Field(min_length=1, description="nodes in the partition")
    priority_tier: int = Field(1, ge=1, le=65_533, description="PriorityTier: jobs of a higher tier preempt lower ones")
    preempt_mode: Literal["REQUEUE", "CANCEL", "OFF"] = Field("REQUEUE", description="what preemption does")
    default: bool = Field(False, description="the default partition")


class SlurmCluster(Strict):
    """A SLURM cluster clusterbook configures itself (the lab's); leave out where SLURM is managed elsewhere."""

    cluster_name: Name = Field(description="ClusterName in slurm.conf")
    controller: Name = Field(description="node running slurmctld")
    partitions: list[SlurmPartition] = Field(min_length=1, description="partitions")
    grace_seconds: int = Field(30, ge=0, le=3600, description="GraceTime for preempted jobs: SIGTERM, then SIGKILL")
    requeue_hold_s: int = Field(SLURM_REQUEUE_HOLD_S, ge=10, le=3600,
                                description="how long a requeued job waits before it may start again: slurm.conf's "
                                            "AuthInfo=cred_expire (also a job step credential's lifetime; SLURM's "
                                            "default 120 s; the lab measured 30 s safe)")


class SlurmQos(Strict):
    """A quality of service of the site's SLURM, as its administrators set it (sacctmgr)."""

    name: SlurmName = Field(description="QoS name")
    priority: int = Field(ge=0, le=2**31 - 1, description="its priority")
    preempts: list[SlurmName] = Field(default_factory=list, description="QoS whose jobs it preempts")
    used_by: Line = Field(description="whose jobs run with it")


class SlurmSite(Strict):
    """Where SLURM is managed elsewhere: the facts of it that decide when the tiers run (shown in the docs)."""

    qos: list[SlurmQos] = Field(default_factory=list, description="QoS levels and who preempts whom")
    partitions: dict[SlurmName, Line] = Field(default_factory=dict,
                                              description="partition name -> what runs there (troubleshooting "
                                                          "looks at each)")
    tier_partitions: list[SlurmName] = Field(default_factory=list, max_length=64,
                                             description="the partitions the site gives clusterbook's tiers: a tier "
                                                         "runs only in one of these (never in another workload's)")


class AlertEmail(Strict):
    """Alertmanager's e-mail receiver: who gets the alerts, through which mail relay."""

    to: list[Email] = Field(min_length=1, max_length=20, description="who gets every alert and its resolution")
    sender: Email = Field(description="the From: address")
    smarthost: HostPort = Field(description="the mail relay, host:port (e.g. smtp.example.org:587)")
    require_tls: bool = Field(True, description="refuse to send without STARTTLS")


class Release(Strict):
    """A release tarball, pinned by its sha256."""

    url: Url = Field(description="where the tarball is downloaded from")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="its sha256 (the download is refused when it differs)")


class MonitoringReleases(Strict):
    """Where an EL monitoring node gets Prometheus and Alertmanager: neither EL nor EPEL 8 packages them (EPEL has
    only the node exporter). The linux-amd64 tarballs of prometheus.io/download, with the sums it lists."""

    prometheus: Release = Field(description="prometheus-<version>.linux-amd64.tar.gz (prometheus and promtool)")
    alertmanager: Release = Field(description="alertmanager-<version>.linux-amd64.tar.gz (alertmanager and amtool)")


ALERT_REPEAT_S = 4 * 3600  # Alertmanager tells again of an alert still firing after this long (its repeat_interval);
# a group interval longer than it would hold back what the repeat promises


class Monitoring(Strict):
    """Prometheus, Alertmanager and the node exporters (Debian's packages; EPEL's node exporter on EL nodes, and
    Prometheus and Alertmanager from their release tarballs on an EL monitoring node), rendered from the cluster."""

    node: Name = Field(description="node running Prometheus and Alertmanager")
    port: Port = Field(9090, description="Prometheus's port")
    alertmanager_port: Port = Field(9093, description="Alertmanager's port")
    node_exporter_port: Port = Field(9100, description="the node exporter's port on every node")
    alert_group_wait_s: int = Field(30, ge=0, le=600, description="how long Alertmanager gathers a new group of "
                                                                  "alerts before its first notification")
    alert_group_interval_s: int = Field(300, ge=1, le=ALERT_REPEAT_S, description="how long Alertmanager waits after a "
                                                                          "group's last notification before it "
                                                                          "tells of a change in it (an alert "
                                                                          "firing again, or resolved)")
    alert_journal_port: Port = Field(9097, description="loopback port on the monitoring node of the local receiver "
                                                      "that writes every alert to its journal")
    scrape_interval_s: int = Field(15, ge=5, le=300, description="how often every target is scraped")
    retention_days: int = Field(15, ge=1, le=3650, description="how long Prometheus keeps samples")
    probe_interval_s: int = Field(60, ge=10, le=3600, description="how often the monitoring node asks every tier "
                                                                  "for /health and a one-token completion (its "
                                                                  "time to first token)")
    alert_webhook: Url | None = Field(None, description="where Alertmanager sends alerts, as JSON (none: see "
                                                       "alert_email)")
    alert_email: AlertEmail | None = Field(None, description="who gets alerts by e-mail (with alert_webhook: "
                                                             "both; neither: refused, unless alerts_unrouted names the "
                                                             "decision that accepts it)")
    alerts_unrouted: Name | None = Field(None, description="the decision (its id in `decisions`) that accepts "
                                                           "alerts with no receiver for now; without it, a "
                                                           "monitoring section with neither alert_webhook nor "
                                                           "alert_email is refused")
    el_releases: MonitoringReleases | None = Field(None, description="the release tarballs an EL monitoring node "
                                                                     "installs (required there; refused on Debian, "
                                                                     "whose packages are used)")
    journald_max_use: str = Field("1G", pattern=r"^[1-9][0-9]{0,6}[KMG]$",
                                  description="journald's SystemMaxUse= on every node "
                                                                         "(the services log to the journal)")


class Planner(Strict):
    """Constants of the capacity planner (where each default was measured: model/measured.py)."""

    device_overhead_mib: int = Field(int(PLANNER["device_overhead_mib"].value), ge=0, le=65_536,
                                     description="fixed memory per GPU and process: CUDA context, cuBLAS, the pool's "
                                                 "first blocks, MiB")
    rpc_hop_ms: float = Field(PLANNER["rpc_hop_ms"].value, ge=0, le=1000,
                              description="per-token cost of each RPC device: round trips and commands")
    headroom_pct: float = Field(5, ge=0, le=50, description="memory kept free on every device, %")
    local_load_gbs: float = Field(PLANNER["local_load_gbs"].value, ge=0.01, le=10_000,
                                  description="how fast a head loads its own share from page cache onto its devices, "
                                              "GB/s")
    rpc_load_gbs: float = Field(PLANNER["rpc_load_gbs"].value, ge=0.01, le=10_000,
                                description="how fast a worker's share travels through llama.cpp's RPC at load, "
                                            "GB/s (the RPC network's bandwidth caps it)")
    rpc_fast_load_gbs: float = Field(PLANNER["rpc_fast_load_gbs"].value, ge=0.01, le=10_000,
                                     description="the same with an engine patch that speeds up rpc_load (patches/"
                                                 "rpc-receive-pinned.patch with P1 and P2), GB/s (the RPC network's "
                                                 "bandwidth caps it)")
    weights_hash_gbs: float = Field(PLANNER["weights_hash_gbs"].value, ge=0.01, le=10_000,
                                    description="how fast a restarted head hashes a worker's kept share instead of "
                                                "sending it (an engine patch that speeds up kept_weights), GB/s")
    weights_rehash_gbs: float = Field(PLANNER["weights_rehash_gbs"].value, ge=0.01, le=10_000,
                                      description="how fast a worker that keeps weights reads back from its GPU and "
                                                  "hashes those a head sent it without hashes, when that head goes "
                                                  "(none where an engine patch speeds up hash_on_arrival), GB/s")
    mlock_gbs: float = Field(PLANNER["mlock_gbs"].value, ge=0.01, le=10_000,
                             description="how fast a head maps and locks its whole model file (a tier with mlock) "
                                         "before it loads, GB/s")
    prompt_memory_pct: float = Field(PLANNER["prompt_memory_pct"].value, ge=1, le=100,
                                     description="the share of a GPU's memory bandwidth a prompt's memory-bound work "
                                                 "reaches (weights dequantized for cuBLAS, attention scores), %")
    prompt_gemm_pct: float = Field(PLANNER["prompt_gemm_pct"].value, ge=1, le=100,
                                   description="the share of a GPU's FP16 tensor rate (its tflops) a prompt's "
                                               "products of weights reach, %")
    prompt_flash_pct: float = Field(PLANNER["prompt_flash_pct"].value, ge=1, le=100,
                                    description="the share of a GPU's FP16 tensor rate flash attention reaches on "
                                                "a prompt, %")
    prompt_scores_bytes: float = Field(PLANNER["prompt_scores_bytes"].value, ge=1, le=1000,
                                       description="bytes moved per attention score without flash attention (the "
                                                   "scores written, soft-maxed, converted and read back)")
    slurm_step_restart_s: float = Field(PLANNER["slurm_step_restart_s"].value, ge=0, le=600,
                                        description="from a step's end until the job script has started the "
                                                    "head again inside the job, apart from the model's load, s: "
                                                    "the script's 1 s watch, the head's stop, srun starting the "
                                                    "ended workers and their ports answering")
    slurm_submit_start_s: float = Field(PLANNER["slurm_submit_start_s"].value, ge=0, le=600,
                                        description="from the keeper's submission of a SLURM job until it answers, "
                                                    "apart from the model's load, when its nodes are free, s: "
                                                    "slurmctld's next pass (once a second) and the job's start")
    slurm_start_s: float = Field(PLANNER["slurm_start_s"].value, ge=0, le=3600,
                                 description="from the end of a requeued SLURM job's hold until it answers again, "
                                             "apart from the model's load, s: the scheduler's next pass, the job's "
                                             "start and the gateway's update")
    site_requeue_hold_s: int | None = Field(None, ge=10, le=3600,
                                            description="where SLURM is managed elsewhere: its slurm.conf's "
                                                        "AuthInfo=cred_expire, s (none: SLURM's default 120 s; "
                                                        "where clusterbook configures SLURM, slurm.requeue_hold_s "
                                                        "sets it)")
    site_batch_sched_delay_s: int | None = Field(None, ge=0, le=60,
                                                 description="where SLURM is managed elsewhere: its slurm.conf's "
                                                             "SchedulerParameters=batch_sched_delay, s (none: "
                                                             "SLURM's default 3 s): no batch job starts within this "
                                                             "of SLURM's last scheduling pass")
    weights_error_pct: float = Field(PLANNER["weights_error_pct"].value, ge=0, le=50,
                                     description="how far llama.cpp's own load report may differ from the planned "
                                                 "weights, %; the solver keeps this much free beside headroom_pct")
    compute_error_pct: float = Field(PLANNER["compute_error_pct"].value, ge=0, le=100,
                                     description="the same for the compute buffers, %")
    slurm_mem_margin_pct: float = Field(10, ge=0, le=100,
                                        description="a SLURM job's --mem must exceed the planned host memory "
                                                    "by this, %")
    co_reside: list[Annotated[list[Name], Field(min_length=2, max_length=32)]] = Field(
        default_factory=list, max_length=32,
        description="groups of tiers that must serve at the same time, e.g. [[fast, reasoning]]: `invoke check` "
                    "refuses a placement where one of a group waits for another (and names the placement "
                    "`invoke plan --solve` finds), and the solver ranks placements that keep every group "
                    "together first")

