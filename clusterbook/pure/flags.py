"""Command lines of llama-server and the RPC worker, derived from a tier; each flag says what it does and why."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass

from clusterbook.model.schema import MLOCK_FLAG_DEPRECATED_BUILD, Cluster, RouterTier, RpcTier
from clusterbook.pure import layout
from clusterbook.pure import topology as topo
from clusterbook.pure.planner.capacity import rpc_spin_us


@dataclass(frozen=True)
class Flag:
    """One command-line flag with its value, what it does, and why it has this value."""

    flag: str
    value: str | None
    what: str
    why: str

    def argv(self) -> list[str]:
        return [self.flag] if self.value is None else [self.flag, self.value]


def binary(c: Cluster, name: str) -> str:
    return posixpath.join(c.engine.install_dir, name)


def _common(c: Cluster, tier: RouterTier | RpcTier) -> list[Flag]:
    flags = [
        Flag("--host", topo.http_address(c, tier), "address the HTTP API listens on",
             f"the node's {topo.listen_network(c, tier)} address; the gateway and clients connect here"),
        Flag("--port", str(tier.port), "HTTP port", f"tier {tier.name}'s port in the cluster file"),
        Flag("--ctx-size", str(tier.ctx_size), "context window in tokens (shared by all slots)",
             "sized so weights, KV cache and compute buffers fit every device (see the capacity plan)"),
        Flag("--parallel", str(tier.parallel), "server slots decoding at once",
             "1 is the baseline for pipeline-parallel RPC (fewer bubbles); raise only if bench shows gains"
             if isinstance(tier, RpcTier) else "concurrent requests per loaded model"),
        Flag("--timeout", str(tier.timeout_s), "HTTP read/write timeout, seconds",
             "long prompts on a 72B model take minutes to process" if isinstance(tier, RpcTier)
             else "server default made explicit"),
    ]
    if tier.threads:
        flags.append(Flag("--threads", str(tier.threads), "CPU threads for generation",
                          "one per physical core of the node"))
    if tier.backend_sampling:
        flags.append(Flag("--backend-sampling", None, "sample on the device: only the chosen token leaves the GPU",
                          "measured on 2 x H200: the 8B served on one GPU 210 -> 222 tok/s, the split 89.9 -> 90.9 % "
                          "of llama-bench; a grammar, reasoning budget or n_probs samples on the CPU as before"))
    if tier.api_key and tier.api_key.file:
        flags.append(Flag("--api-key-file", tier.api_key.file, "file holding the API key (Bearer token)",
                          "the key stays on the node, out of the cluster file and the process list"))
    elif tier.api_key:
        flags.append(Flag("--api-key", f"${{{tier.api_key.env}}}", "API key (Bearer token)",
                          f"read from the environment variable {tier.api_key.env} at start"))
    return flags


def server_flags(c: Cluster, tier: RouterTier | RpcTier) -> list[Flag]:
    """llama-server flags for a tier, in a stable order."""
    if isinstance(tier, RouterTier):
        return _router_flags(c, tier)
    model = c.model(tier.model)
    devices = topo.offload_devices(c, tier)
    ngl = topo.n_gpu_layers(c, tier)
    flags = [
        Flag("--model", posixpath.join(c.storage.models_dir, model.file), "model file",
             f"{model.id}, {model.quantization}"),
        Flag("--alias", model.id, "model id reported by /v1/models and expected in requests",
             "the id clients and the router use"),
    ]
    flags += _common(c, tier)
    flags += [
        Flag("--rpc", ",".join(topo.rpc_endpoints(c, tier)), "RPC workers whose devices join this server",
             f"each worker's {c.rpc_network} address; RPC devices come first in llama.cpp's device order"),
        Flag("--split-mode", "layer", "give each device whole layers (pipelined)",
             "RPC has no split buffers; layer split also sidesteps head-count divisibility"),
        Flag("--tensor-split", topo.tensor_split_flag(c, tier), "share of layers per device, in device order",
             "shares from the cluster file, ordered " + ", ".join(f"{d.name}={d.node}" for d in devices)),
        Flag("--n-gpu-layers", str(ngl), "layers offloaded to the devices",
             "all layers (output included)" if ngl == topo.FULL_OFFLOAD
             else f"the head has no GPU and keeps its {topo.head_cpu_blocks(c, tier)} blocks on its CPU"),
        Flag("--cache-type-k", tier.cache_type_k, "K cache element type",
             "quantized K cuts KV memory" if tier.cache_type_k != "f16" else "full precision"),
        Flag("--cache-type-v", tier.cache_type_v, "V cache element type",
             "a quantized V cache needs flash attention" if tier.cache_type_v == "f16" and tier.flash_attn == "off"
             else "as configured"),
        Flag("--flash-attn", tier.flash_attn, "flash attention kernels",
             "off as configured: the capacity plan gives what turning it on would allow" if tier.flash_attn == "off"
             else "kernels for every GPU of the tier (compute capability 7.0 or more)"),
        Flag("--batch-size", str(tier.batch_size), "logical batch (tokens per decode call)",
             "matched to ubatch to halve network round trips (seed 004)" if tier.batch_size == tier.ubatch_size
             else "as configured"),
        Flag("--ubatch-size", str(tier.ubatch_size), "physical batch",
             "bounds the compute buffers on each device"),
    ]
    if tier.mlock:
        if c.engine.build >= MLOCK_FLAG_DEPRECATED_BUILD:
            flags.append(Flag("--load-mode", "mmap+mlock", "map the model and lock what stays in RAM",
                              f"the old --mlock at build {c.engine.build}; its 'mlock' reads every tensor through a "
                              "heap copy: the worker's share then arrives at 0.7 GB/s, not 3.3 (full-size rehearsal)"))
        else:
            flags.append(Flag("--mlock", None, "lock the model in RAM", "prevents the model being swapped out"))
    if model.reasoning_content:
        flags.append(Flag("--reasoning-format", "deepseek", "put chain-of-thought in message.reasoning_content",
                          f"{model.id} is a reasoning model"))
    flags.append(Flag("--metrics", None, "enable the Prometheus /metrics endpoint", "verify and bench read it"))
    return flags


def _router_flags(c: Cluster, tier: RouterTier) -> list[Flag]:
    return [
        Flag("--models-preset", layout.models_preset_path(c, tier), "router mode: models this server may load",
             f"generated from tier {tier.name}'s model list: " + ", ".join(tier.models)),
        Flag("--models-max", str(tier.models_max), "models resident at once; the least recently used unloads",
             "what fits the node's GPU memory (see the capacity plan)"),
        *_common(c, tier),
        Flag("--n-gpu-layers", str(topo.FULL_OFFLOAD), "layers offloaded to the GPU (inherited by each model)",
             "every model of this tier fits one GPU"),
    ]


def worker_flags(c: Cluster, tier: RpcTier, node: str) -> list[Flag]:
    """RPC worker flags for one worker node."""
    return [
        Flag("--host", topo.address(c, node, c.rpc_network), "address the RPC worker binds to",
             f"the {c.rpc_network} address only: llama.cpp RPC has no authentication (never 0.0.0.0)"),
        Flag("--port", str(tier.rpc_port), "RPC port", f"tier {tier.name}'s rpc_port"),
    ]


def server_argv(c: Cluster, tier: RouterTier | RpcTier) -> list[str]:
    return [binary(c, c.engine.server_binary)] + [a for f in server_flags(c, tier) for a in f.argv()]


def rpc_env(c: Cluster, tier: RouterTier | RpcTier) -> list[tuple[str, str, str]]:
    """An RPC tier's environment beyond the library path, for its head and workers alike: (name, value, what it
    does), each read by an engine patch and only where the cluster's series has it; numbers, safe in any file."""
    env = []
    if c.kept_weights_s(tier):
        env.append(("GGML_RPC_KEEP_S", str(c.kept_weights_s(tier)),
                    "the RPC workers keep a head's weights this many seconds after it went"))
    if spin := rpc_spin_us(c, tier):
        env.append(("GGML_RPC_SPIN_US", str(spin),
                    "head and workers poll up to this many microseconds for the next message before they sleep "
                    "(twice a planned token)"))
    return env


def worker_argv(c: Cluster, tier: RpcTier, node: str) -> list[str]:
    return [binary(c, c.engine.rpc_worker_binary)] + [a for f in worker_flags(c, tier, node) for a in f.argv()]


def shell_line(argv: list[str], indent: str = "    ") -> str:
    """argv as a shell command, one flag per continued line; ${VAR} stays unquoted for expansion."""
    def q(arg: str) -> str:
        return arg if arg.startswith("${") and arg.endswith("}") else shlex.quote(arg)
    lines, i = [q(argv[0])], 1
    while i < len(argv):
        if "=" not in argv[i] and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            lines.append(f"{q(argv[i])} {q(argv[i + 1])}")
            i += 2
        else:
            lines.append(q(argv[i]))
            i += 1
    return (" \\\n" + indent).join(lines)
