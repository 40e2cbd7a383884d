"""The cluster file's schema: pydantic v2 models, one class per section (the sections in nodeschema, tierschema,
recordschema, siteschema); unknown keys are errors."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
)

from clusterbook.model.nodeschema import (  # noqa: F401 (the schema's names, one import for its users)
    DEBIAN_12,
    OS_FAMILY,
    Access,
    ApiKeyRef,
    Architecture,
    ClusterInfo,
    Engine,
    EnginePatch,
    EngineSource,
    Gpu,
    JumpHost,
    Model,
    ModelSource,
    Network,
    Node,
    OperatingSystem,
    Storage,
)
from clusterbook.model.parts import MAX_PARTS, PART_NAME
from clusterbook.model.parts import SECTIONS as PART_SECTIONS
from clusterbook.model.recordschema import (  # noqa: F401 (the schema's names, one import for its users)
    DEFAULT_RECOVERY,
    HIGHER_IS_BETTER,
    LEGACY_FOLDERS,
    LEGACY_UNIT,
    LEVEL_MAX,
    LOWER_IS_BETTER,
    Claim,
    Contact,
    Criterion,
    Decision,
    FixStep,
    Legacy,
    LegacyFile,
    LegacyUnit,
    Level,
    Observation,
    Owner,
    Rehearsal,
    RehearsedSettings,
    Targets,
    Trouble,
)
from clusterbook.model.schemabase import (  # noqa: F401 (the schema's names, one import for its users)
    BACKEND_SAMPLING_BUILD,
    FLASH_ATTN_MIN_CC,
    FLASH_ATTN_PROVEN_CC,
    LATEST_KNOWN_BUILD,
    MAX_CONTEXT,
    MLOCK_FLAG_DEPRECATED_BUILD,
    PYPI_SDIST_BUILDS,
    QUANTIZED_CACHE_TYPES,
    ROUTER_MODE_BUILD,
    RPC_RENAME_BUILD,
    CacheType,
    Port,
    Share,
    Strict,
)
from clusterbook.model.siteschema import (  # noqa: F401 (the schema's names, one import for its users)
    SLURM_BATCH_SCHED_DELAY_S,
    SLURM_REQUEUE_HOLD_S,
    AlertEmail,
    Monitoring,
    MonitoringReleases,
    Planner,
    Release,
    SlurmCluster,
    SlurmPartition,
    SlurmQos,
    SlurmSite,
)
from clusterbook.model.tierschema import (  # noqa: F401 (the schema's names, one import for its users)
    RESERVED_TIER_NAMES,
    EmbeddingsTier,
    Gateway,
    GatewayRoute,
    OnDemand,
    Router,
    RouterRule,
    RouterTier,
    RpcTier,
    SlurmJob,
    SystemdService,
    Tier,
    TierBase,
    TierName,
)
from clusterbook.model.valuetypes import (
    Name,
)


class Cluster(Strict):
    """The whole cluster file."""

    cluster: ClusterInfo = Field(description="name, description, docs URL")
    parts: list[Annotated[str, Field(pattern=PART_NAME.pattern, max_length=255)]] = Field(
        default_factory=list, max_length=MAX_PARTS,
        description="files beside this one that hold some of its sections (" + ", ".join(PART_SECTIONS) + "), "
                    "relative to it: the settings stay here, the records and on-call entries there")
    owner: Owner | None = Field(None, description="who answers for the cluster and whom to escalate to (the home "
                                                  "and troubleshooting pages show it); a production file without "
                                                  "one is refused unless owner_unrecorded names a decision")
    owner_unrecorded: Name | None = Field(None, description="the decision (its id in `decisions`) that accepts a "
                                                            "production file with no owner for now")
    access: Access = Field(description="SSH user, key, known_hosts, jump hosts, connect timeout")
    networks: dict[Name, Network] = Field(min_length=1, description="networks by name")
    nodes: list[Node] = Field(min_length=1, description="the machines")
    engine: Engine = Field(description="the llama.cpp build")
    storage: Storage = Field(description="paths on the nodes")
    models: list[Model] = Field(min_length=1, description="GGUF model files")
    tiers: list[Tier] = Field(min_length=1, description="inference tiers (kind router, rpc or embeddings)")
    router: Router | None = Field(None, description="task type -> model rules")
    gateway: Gateway | None = Field(None, description="nginx / tailscale serve in front of the tiers")
    targets: list[Targets] = Field(default_factory=list, description="success criteria per tier")
    decisions: list[Decision] = Field(default_factory=list, description="the decision log")
    troubleshooting: list[Trouble] = Field(default_factory=list, description="symptom -> cause -> fix")
    observations: list[Observation] = Field(default_factory=list, max_length=1000,
                                            description="figures measured on this cluster before clusterbook "
                                                        "(shown on the results page with their source)")
    legacy: Legacy | None = Field(None, description="what ran before clusterbook, retired by invoke stop.legacy")
    rehearsals: list[Rehearsal] = Field(default_factory=list, max_length=64,  # 200 took the docs build 125 s
                                        description="figures measured at full size on other cards held to this "
                                                    "cluster's (the capacity page shows each beside the plan)")
    criteria: list[Criterion] = Field(default_factory=list, max_length=200,
                                      description="success criteria from earlier records and what checks each "
                                                  "now (the results page)")
    planner: Planner = Field(default_factory=Planner, description="capacity planner constants")
    slurm: SlurmCluster | None = Field(None, description="the SLURM cluster, when clusterbook configures it")
    monitoring: Monitoring | None = Field(None, description="Prometheus scraping every tier, node and GPU; alerts "
                                                            "from the targets")
    slurm_site: SlurmSite | None = Field(None, description="the site's SLURM, when it is managed elsewhere: QoS and "
                                                           "partitions (docs and troubleshooting)")

    # --- lookups used everywhere -------------------------------------------------------------
    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def model(self, model_id: str) -> Model:
        return next(m for m in self.models if m.id == model_id)

    def tier(self, name: str) -> Tier:
        return next(t for t in self.tiers if t.name == name)

    def kept_weights_s(self, tier: Tier) -> int:
        """How long a tier's RPC workers keep a head's weights after it went: its keep_weights_s where an engine
        patch speeds up kept_weights (the one that reads it), else 0."""
        patched = self.engine.patched_for("kept_weights")
        return tier.keep_weights_s if patched else 0

    def targets_for(self, tier: str) -> Targets | None:
        return next((t for t in self.targets if t.tier == tier), None)

    def recovery_level(self, tier: str) -> Level:
        """How soon the tier must answer again after a crash: its recovery_s target, else DEFAULT_RECOVERY (the
        window of its tier-down alert, of bench.recovery and of the recovery scenarios)."""
        targets = self.targets_for(tier)
        return targets.recovery_s if targets and targets.recovery_s else DEFAULT_RECOVERY

    @property
    def slurm_requeue_hold_s(self) -> int:
        """A requeued job's hold: what clusterbook configures (slurm.requeue_hold_s), else what the site's
        slurm.conf is declared to say (planner.site_requeue_hold_s), else SLURM's default."""
        if self.slurm:
            return self.slurm.requeue_hold_s
        return self.planner.site_requeue_hold_s or SLURM_REQUEUE_HOLD_S

    @property
    def slurm_batch_sched_delay_s(self) -> int:
        """How long after SLURM's last scheduling pass a batch job may wait for the next: what the site's
        slurm.conf is declared to say (planner.site_batch_sched_delay_s), else SLURM's default (the lab's slurm.conf,
        which clusterbook writes, keeps it)."""
        site = None if self.slurm else self.planner.site_batch_sched_delay_s
        return SLURM_BATCH_SCHED_DELAY_S if site is None else site

    @property
    def slurm_tiers(self) -> list[Tier]:
        """The tiers that run as SLURM jobs."""
        return [t for t in self.tiers if t.manager == "slurm"]

    @property
    def keeper_node(self) -> str | None:
        """Where the keeper runs (it submits the SLURM tiers' jobs and releases idle ones): the controller, else
        the first SLURM tier's first node."""
        tiers = self.slurm_tiers
        return (self.slurm_controller or tiers[0].nodes[0]) if tiers else None

    @property
    def slurm_controller(self) -> str | None:
        """The node where sbatch/scancel run: the configured controller, else the first node with role controller."""
        if self.slurm:
            return self.slurm.controller
        return next((n.name for n in self.nodes if "controller" in n.roles), None)

    @property
    def management_network(self) -> str:
        return next(name for name, net in self.networks.items() if net.role == "management")

    @property
    def rpc_network(self) -> str:
        """The network llama.cpp RPC uses: the one marked carries_rpc, else the fabric, else management."""
        marked = [name for name, net in self.networks.items() if net.carries_rpc]
        if marked:
            return marked[0]
        fabric = [name for name, net in self.networks.items() if net.role == "fabric"]
        return fabric[0] if fabric else self.management_network

