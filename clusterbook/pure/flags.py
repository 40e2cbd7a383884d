"""The flags every tier's llama-server takes and the RPC worker's, derived from a tier; each flag says what it does and
why (a kind's own flags are in its module, clusterbook/pure/kinds)."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass

from clusterbook.model.schema import Cluster, RpcTier, Tier
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


def common_flags(c: Cluster, tier, parallel_why: str, timeout_why: str) -> list[Flag]:
    """The flags every kind's llama-server takes; why --parallel and --timeout have their value is the kind's."""
    flags = [
        Flag("--host", topo.http_address(c, tier), "address the HTTP API listens on",
             f"the node's {topo.listen_network(c, tier)} address; the gateway and clients connect here"),
        Flag("--port", str(tier.port), "HTTP port", f"tier {tier.name}'s port in the cluster file"),
        Flag("--ctx-size", str(tier.ctx_size), "context window in tokens (shared by all slots)",
             "sized so weights, KV cache and compute buffers fit every device (see the capacity plan)"),
        Flag("--parallel", str(tier.parallel), "server slots decoding at once", parallel_why),
        Flag("--timeout", str(tier.timeout_s), "HTTP read/write timeout, seconds", timeout_why),
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


def worker_flags(c: Cluster, tier: RpcTier, node: str) -> list[Flag]:
    """RPC worker flags for one worker node."""
    return [
        Flag("--host", topo.address(c, node, c.rpc_network), "address the RPC worker binds to",
             f"the {c.rpc_network} address only: llama.cpp RPC has no authentication (never 0.0.0.0)"),
        Flag("--port", str(tier.rpc_port), "RPC port", f"tier {tier.name}'s rpc_port"),
    ]


def rpc_env(c: Cluster, tier: Tier) -> list[tuple[str, str, str]]:
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


def server_command(c: Cluster, flags: list[Flag]) -> list[str]:
    """llama-server's argv with these flags (each kind's: kinds.server_flags)."""
    return [binary(c, c.engine.server_binary)] + [a for f in flags for a in f.argv()]


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
