"""The cluster file's tiers and what reaches them: SLURM jobs and systemd services, router and RPC tiers,
the model selector and the gateway."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from clusterbook.model.nodeschema import ApiKeyRef
from clusterbook.model.schemabase import MAX_CONTEXT, ROUTER_MODE_BUILD, CacheType, Port, Share, Strict
from clusterbook.model.valuetypes import (
    AbsPath,
    Gres,
    HostName,
    IpAddress,
    Line,
    Name,
    Prose,
    SlurmName,
    SlurmTime,
    UrlPath,
)


class SlurmJob(Strict):
    """SLURM settings of a tier's batch job (seed 004's preemptible jobs)."""

    partition: SlurmName = Field(description="partition, e.g. gpu_ai")
    qos: SlurmName | None = Field(None, description="quality of service, e.g. ai_opportunistic (needs accounting)")
    mem: str = Field(pattern=r"^[1-9][0-9]{0,8}[KMGT]$",
                     description="memory per node (--mem); must fit model + KV + buffers")
    mem_failed: str | None = Field(None, pattern=r"^[1-9][0-9]{0,8}[KMGT]$",
                                   description="a --mem measured to fail (the job killed at its limit; seed 004: "
                                               "64G, SIGKILL at 25-40K tokens): mem must be above it, and plan "
                                               "--solve never proposes less than it")
    time_limit: SlurmTime | None = Field(None, description="--time, e.g. 7-00:00:00 (none: partition default)")
    grace_seconds: int = Field(30, ge=10, le=3600, description="preemption grace time: SIGTERM to SIGKILL (the batch "
                                                                        "script stops its steps 5 s before it ends)")
    requeue: bool = Field(True, description="requeue when preempted (SLURM holds a requeued job for its "
                                            "cred_expire, 120 s by default); false: a preempted job is cancelled "
                                            "and the keeper submits it again within keeper_interval_s, with no "
                                            "hold (the lab: back 10 s after a cancellation against 63 s after a "
                                            "requeue; decision D21)")
    gres: Gres | None = Field("gpu:1", description="generic resources per node (--gres)")
    cpus: int | None = Field(None, ge=1, le=4096, description="CPUs per node (--cpus-per-task, for the job and each "
                                                              "step; none: the tier's threads, else 1); a step gets "
                                                              "only these where SLURM constrains cores")
    step_restarts: int = Field(3, ge=0, le=20,
                               description="how often in a row the job script starts its ended steps again "
                                           "inside the job (every ended worker, then the head) without the tier "
                                           "answering /health in between, before it stops and ends the job (SLURM "
                                           "requeues it, or the keeper submits it again); health resets the "
                                           "count; 0: the first step to end ends the job")
    keeper_interval_s: int = Field(60, ge=2, le=3600,
                                   description="how often the keeper on the controller looks for the job and "
                                               "resubmits it when none is pending or running (a failed, "
                                               "cancelled or, with requeue false, preempted job); one squeue "
                                               "per SLURM tier each time")


class OnDemand(Strict):
    """A SLURM tier that gives its GPUs back when idle and starts again on the first request (issue 33)."""

    idle_s: int = Field(ge=5, le=7 * 86_400,
                        description="release the tier after this many seconds with no request through the gateway "
                                    "and none in flight: its job ends cleanly and the GPUs go back to the queue "
                                    "(at least the predicted cold start)")
    wait_cap_s: int | None = Field(None, ge=5, le=3600,
                                   description="how long a request to a released tier waits at the gateway while "
                                               "the tier starts; past it, 503 with Retry-After (default: the "
                                               "planner's predicted cold start × 1.5 + 10 s)")


class SystemdService(Strict):
    """systemd settings of one service."""

    restart: Literal["always", "on-failure"] = Field("always", description="Restart=")
    restart_sec: int = Field(10, ge=0, le=3600, description="RestartSec=, seconds")
    start_limit_interval_s: int = Field(
        0, ge=0, le=86_400,
        description="StartLimitIntervalSec= (0: restart without end; systemd's default gives up after 5 "
                    "starts in 10 s, which a head reaches in seconds while a worker is down)")
    limit_nofile: int = Field(65535, ge=1024, le=1_048_576, description="LimitNOFILE=")
    memory_max: str | None = Field(None, pattern=r"^[1-9][0-9]{0,8}[KMGT]$", description="MemoryMax= (none: no limit)")


# Names of invoke's own tasks and collections: a tier's tasks are deploy.<tier>, stop.<tier>, restart.<tier> and
# deploy.<tier>-workers, so a tier named like one of these would replace it (tests/unit/test_strict_input.py
# compares this set with tasks.py's collection).
RESERVED_TIER_NAMES = frozenset({
    "accept-folder", "apply", "bench", "build", "check", "demo", "deploy", "docs", "down", "fabric", "faults",
    "fetch", "gateway",
    "hash", "install", "lab", "logs", "models", "monitoring", "plan", "preflight", "publish", "recovery", "reference",
    "rehearse", "render", "restart", "rollback", "router", "run", "serve", "slurm", "ssh", "ssh-config", "status",
    "stop", "tier", "tune", "up", "verify", "legacy", "restore"})


def _tier_name(value: str) -> str:
    if value in RESERVED_TIER_NAMES:
        raise ValueError(f"'{value}' is the name of a built-in task or collection (invoke {value} / "
                         f"deploy.{value}): pick another tier name")
    if value.endswith("-workers"):
        raise ValueError("may not end in -workers: deploy.<tier>-workers is an RPC tier's own task")
    return value


TierName = Annotated[str, AfterValidator(_tier_name),
                     Field(title="tier name", pattern=r"^[a-z][a-z0-9-]*$", max_length=32,
                           description="a tier name: lower-case letters, digits and - (it becomes invoke task names, "
                                       "which a dot would split)")]


TierKindName = Literal["router", "rpc", "embeddings"]  # the kinds below, each a class with its `kind`


class TierBase(Strict):
    """Settings every tier has."""

    name: TierName = Field(description="tier name, used in URLs, unit names and task names")
    description: Line = Field("", description="what the tier is for")
    manager: Literal["systemd", "slurm"] = Field("systemd", description="who runs it")
    port: Port = Field(description="HTTP port of llama-server")
    listen_network: Name | None = Field(None, description="network whose address the HTTP API binds to "
                                                           "(default: the management network)")
    api_key: ApiKeyRef | None = Field(None, description="API key reference (none: open API)")
    threads: int | None = Field(None, ge=1, le=8192, description="CPU threads (--threads)")
    ctx_size: int = Field(4096, ge=256, le=MAX_CONTEXT, description="context size in tokens (--ctx-size)")
    parallel: int = Field(1, ge=1, le=64, description="server slots (--parallel)")
    timeout_s: int = Field(600, ge=1, le=86_400, description="HTTP read/write timeout (--timeout)")
    backend_sampling: bool = Field(False, description="llama-server samples on the device (--backend-sampling, "
                                   "experimental upstream): only the chosen token leaves the GPU each token; a request "
                                   "with a grammar, a reasoning budget or n_probs samples on the CPU as before")
    slurm: SlurmJob | None = Field(None, description="SLURM job settings (required when manager is slurm)")
    on_demand: OnDemand | None = Field(None, description="a SLURM tier released when idle and started by its first "
                                                         "request, which the gateway holds meanwhile (none: it "
                                                         "runs from deploy to stop)")
    systemd: SystemdService = Field(default_factory=SystemdService, description="the server unit's settings")

    @model_validator(mode="after")
    def _slurm(self) -> TierBase:
        if self.manager == "slurm" and self.slurm is None:
            raise ValueError("manager is slurm: give a slurm section")
        return self

    @property
    def slurm_cpus(self) -> int:
        """CPUs a SLURM job asks per node: the file's, else one per thread, else 1."""
        return (self.slurm.cpus if self.slurm and self.slurm.cpus else None) or self.threads or 1


class RouterTier(TierBase):
    """llama-server in router mode on one node: models load on demand, least recently used unloads."""

    kind: Literal["router"] = Field(description="router: one node, many models on demand")
    node: Name = Field(description="node that runs it")
    models: list[Name] = Field(min_length=1, description="model ids served")
    models_max: int = Field(2, ge=0, le=256, description="models resident at once (--models-max; 0 = unlimited)")

    # what the other kinds' settings are for this kind: the rest of clusterbook reads them on any tier
    workers: ClassVar[tuple[str, ...]] = ()  # no RPC workers
    mlock: ClassVar[bool] = False
    numa_bind: ClassVar[bool] = False
    keep_weights_s: ClassVar[int] = 0
    rpc_port: ClassVar[int] = 0  # no RPC port
    floats: ClassVar[bool] = True  # under SLURM, any node of its partition may run it
    router_mode: ClassVar[bool] = True  # llama-server loads its models on demand; /metrics per model
    min_build: ClassVar[int] = ROUTER_MODE_BUILD  # router mode (--models-preset) appeared at this build
    api: ClassVar[str] = "chat"  # what its clients ask: chat completions

    @property
    def head(self) -> str:
        """The node that serves the HTTP API (in the file; a SLURM job may run elsewhere in its partition)."""
        return self.node

    def node_refs(self) -> list[tuple[tuple, str]]:
        """(field, node) of each node the tier names."""
        return [(("node",), self.node)]

    def model_refs(self) -> list[tuple[tuple, str]]:
        """(field, model id) of each model the tier names."""
        return [(("models", j), m) for j, m in enumerate(self.models)]

    def listeners(self) -> list[tuple[str, int, str, str]]:
        """(node, port, what, field) of every port the tier listens on."""
        return [(self.node, self.port, f"tier {self.name}", "port")]

    @property
    def served_models(self) -> list[str]:
        """Model ids this tier serves."""
        return list(self.models)

    @property
    def nodes(self) -> list[str]:
        """Nodes the tier runs on, head first."""
        return [self.node]


class RpcTier(TierBase):
    """One model split by layers over a head node and RPC worker nodes."""

    kind: Literal["rpc"] = Field(description="rpc: one model split over a head and RPC workers")
    model: Name = Field(description="model id")
    head: Name = Field(description="node running llama-server")
    workers: list[Name] = Field(min_length=1, description="nodes running the RPC worker, in --rpc order")
    rpc_port: Port = Field(50052, description="RPC worker port")
    tensor_split: dict[Name, Share | list[Share]] = Field(
        description="share of layers per node (a list: one entry per GPU of that node); "
                    "rendered in llama.cpp's device order (RPC devices first, head last)")
    cache_type_k: CacheType = Field("f16", description="K cache type (--cache-type-k)")
    cache_type_v: CacheType = Field("f16", description="V cache type (--cache-type-v); quantized needs flash attention")
    batch_size: int = Field(2048, ge=1, le=1_048_576, description="logical batch (--batch-size)")
    ubatch_size: int = Field(512, ge=1, le=1_048_576, description="physical batch (--ubatch-size)")
    mlock: bool = Field(False, description="lock the model in RAM")
    numa_bind: bool = Field(False, description="bind the head to its GPU's NUMA node (numactl)")
    flash_attn: Literal["on", "off", "auto"] = Field("off", description="flash attention")
    worker_systemd: SystemdService = Field(default_factory=lambda: SystemdService(restart_sec=5),
                                           description="the RPC worker units' settings")
    keep_weights_s: int = Field(0, ge=0, le=3600,
                                description="how long an RPC worker keeps the weights of a head that went, for the "
                                            "next head with the same model and split (GGML_RPC_KEEP_S; needs an "
                                            "engine patch that speeds up kept_weights), s; 0: never. A head then "
                                            "hashes the workers' share on every load (planner.weights_hash_gbs)")

    floats: ClassVar[bool] = False  # its nodes are the file's, under SLURM too
    models_max: ClassVar[int] = 1  # its one model
    api: ClassVar[str] = "chat"
    router_mode: ClassVar[bool] = False
    min_build: ClassVar[int] = 0

    @property
    def served_models(self) -> list[str]:
        """Model ids this tier serves."""
        return [self.model]

    @property
    def nodes(self) -> list[str]:
        """Nodes the tier runs on, head first."""
        return [self.head, *self.workers]

    def node_refs(self) -> list[tuple[tuple, str]]:
        """(field, node) of each node the tier names."""
        return [(("head",), self.head)] + [(("workers", j), w) for j, w in enumerate(self.workers)]

    def model_refs(self) -> list[tuple[tuple, str]]:
        """(field, model id) of each model the tier names."""
        return [(("model",), self.model)]

    def listeners(self) -> list[tuple[str, int, str, str]]:
        """(node, port, what, field) of every port the tier listens on."""
        return [(self.head, self.port, f"tier {self.name} (head)", "port")] + [
            (w, self.rpc_port, f"tier {self.name} (RPC worker)", "rpc_port") for w in self.workers]

    @model_validator(mode="after")
    def _batches(self) -> RpcTier:
        if self.ubatch_size > self.batch_size:
            raise ValueError(f"ubatch_size ({self.ubatch_size}) cannot exceed batch_size ({self.batch_size})")
        return self


class EmbeddingsTier(TierBase):
    """llama-server serving one embedding model on one node: /v1/embeddings, one vector for each input."""

    kind: Literal["embeddings"] = Field(description="embeddings: one embedding model on one node, its vectors at "
                                                    "/v1/embeddings")
    node: Name = Field(description="node that runs it")
    model: Name = Field(description="model id (an embedding model; any GGUF model gives vectors)")
    pooling: Literal["mean", "cls", "last"] = Field("mean", description="how the tokens' vectors become the input's "
                                                    "one (--pooling): mean for most embedding models, cls for "
                                                    "BERT-style ones, last for decoder-based ones")
    batch_size: int = Field(2048, ge=1, le=1_048_576, description="logical batch (--batch-size): tokens of one "
                                                                  "request's inputs read together")
    ubatch_size: int = Field(2048, ge=1, le=1_048_576, description="physical batch (--ubatch-size): the longest "
                                                                   "input it embeds (an input must fit one)")

    workers: ClassVar[tuple[str, ...]] = ()  # what the other kinds' settings are for this kind (RouterTier says why)
    mlock: ClassVar[bool] = False
    numa_bind: ClassVar[bool] = False
    keep_weights_s: ClassVar[int] = 0
    rpc_port: ClassVar[int] = 0
    floats: ClassVar[bool] = True
    router_mode: ClassVar[bool] = False
    models_max: ClassVar[int] = 1
    min_build: ClassVar[int] = 0
    api: ClassVar[str] = "embeddings"  # what its clients ask: vectors

    @property
    def head(self) -> str:
        """The node that serves the HTTP API (in the file; a SLURM job may run elsewhere in its partition)."""
        return self.node

    @property
    def served_models(self) -> list[str]:
        """Model ids this tier serves."""
        return [self.model]

    @property
    def nodes(self) -> list[str]:
        """Nodes the tier runs on, head first."""
        return [self.node]

    def node_refs(self) -> list[tuple[tuple, str]]:
        """(field, node) of each node the tier names."""
        return [(("node",), self.node)]

    def model_refs(self) -> list[tuple[tuple, str]]:
        """(field, model id) of each model the tier names."""
        return [(("model",), self.model)]

    def listeners(self) -> list[tuple[str, int, str, str]]:
        """(node, port, what, field) of every port the tier listens on."""
        return [(self.node, self.port, f"tier {self.name}", "port")]

    @model_validator(mode="after")
    def _batches(self) -> EmbeddingsTier:
        if self.ubatch_size > self.batch_size:
            raise ValueError(f"ubatch_size ({self.ubatch_size}) cannot exceed batch_size ({self.batch_size})")
        if self.ubatch_size > self.ctx_size // self.parallel:
            raise ValueError(f"ubatch_size ({self.ubatch_size}) is above a slot's context (ctx_size / parallel = "
                             f"{self.ctx_size // self.parallel}): no input that long fits a slot")
        return self


Tier = Annotated[RouterTier | RpcTier | EmbeddingsTier, Field(discriminator="kind")]


class RouterRule(Strict):
    """Task types that go to one model."""

    tasks: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]] = Field(min_length=1,
                                                                             description="task types")
    model: Name = Field(description="model id")
    why: Prose = Field("", description="reason for the choice")


class Router(Strict):
    """The model selector: task type -> model -> endpoint."""

    script: AbsPath = Field("/usr/local/bin/llama-model-selector", description="install path of the script")
    node: Name | None = Field(None, description="node to install it on (default: every tier node)")

    @field_validator("script")
    @classmethod
    def _a_program_name(cls, value: str) -> str:
        """An executable's name: letters, digits, - and _, and .sh at most (an allow-list: not a page, not a file
        another tool reads by its suffix)."""
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.sh)?", value.rsplit("/", 1)[-1]):
            raise ValueError(f"{value.rsplit('/', 1)[-1]!r} is not a program's name: letters, digits, - and _, "
                             "ending in .sh at most")
        return value
    default_model: Name | None = Field(None, description="model for unknown tasks (none: exit status 2)")
    rules: list[RouterRule] = Field(min_length=1, description="task rules")


class GatewayRoute(Strict):
    """One path of the gateway, proxied to one tier."""

    path: UrlPath = Field(description="URL path prefix, e.g. /reasoning/")
    tier: Name = Field(description="tier name")
    port: Port = Field(description="nginx listen port for this tier")
    continue_streams: bool = Field(True, description="a stream cut by a crash goes on from the text already sent "
                                                     "(an assistant prefill); false: it ends with an error event")


class Gateway(Strict):
    """nginx in front of the tiers, published with tailscale serve."""

    node: Name = Field(description="node running nginx")
    listen: list[IpAddress] = Field(default_factory=lambda: ["127.0.0.1"], description="addresses nginx listens on "
                                                                                      "(each a specific one)")
    routes: list[GatewayRoute] = Field(min_length=1, description="path -> tier")
    tailscale_name: HostName | None = Field(None, description="the gateway's Tailscale DNS name, NODE.TAILNET.ts.net "
                                                              "(tailscale serve publishes it; the site links to it)")
    path_port: Port | None = Field(None, description="also serve every route by its path on this port "
                                                     "(what tailscale serve does, for networks without it)")
    update_interval_s: int = Field(30, ge=5, le=3600, description="how often the endpoint updater runs")
    upstream_dir: AbsPath = Field("/etc/nginx/clusterbook", description="generated upstream files")
    docs_port: Port | None = Field(None, description="serve the published docs site on this port (and at /docs/ "
                                                     "through tailscale serve and the path port): invoke docs.publish")
    docs_dir: AbsPath = Field("/var/www/clusterbook", description="where docs.publish unpacks the site")
    wake_port: Port = Field(8079, description="loopback port of the gateway's hold (wake) service: it holds a "
                                              "request to a tier that is down or starting, and starts a tier on "
                                              "demand")
    hold_margin_s: int = Field(10, ge=0, le=600,
                               description="how much longer than a tier's predicted recovery the gateway holds a "
                                           "request that the tier cannot answer now, s; past it, 503 with "
                                           "Retry-After (the hold must end within the tier's timeout_s)")
    body_max_mib: int = Field(8, ge=1, le=64,
                              description="the largest request body the gateway takes, MiB: nginx's "
                                          "client_max_body_size and the hold's own limit (a 128K-token prompt is "
                                          "under 1 MiB); a larger one gets 413")
    hold_in_flight_max: int = Field(64, ge=1, le=1024,
                                    description="requests the hold service holds at once; one more gets 503 with "
                                                "Retry-After at once (its memory is bounded by this times "
                                                "body_max_mib)")
    queue_per_slot: int = Field(16, ge=1, le=256,
                                description="requests that may wait in a tier's queue per server slot; a request "
                                            "beyond its slots and this queue gets 429 with Retry-After at once")

    @field_validator("listen")
    @classmethod
    def _specific(cls, value: list[str]) -> list[str]:
        for address in value:
            if ipaddress.ip_address(address).is_unspecified:
                raise ValueError(f"{address} listens on every address of the node, the tailnet's and the "
                                 "fabric's too: give each address nginx should answer on (e.g. 127.0.0.1)")
        return value

    @property
    def url(self) -> str | None:
        return f"https://{self.tailscale_name}" if self.tailscale_name else None

    @field_validator("tailscale_name")
    @classmethod
    def _tailnet_name(cls, value: str | None) -> str | None:
        """Tailscale gives every machine NODE.TAILNET.ts.net: any other name would send the site's readers, and its
        links, to a host that is not this gateway."""
        if value is not None and not re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+\.ts\.net", value.lower()):
            raise ValueError("a Tailscale name is NODE.TAILNET.ts.net, as `tailscale status` shows it")
        return value
