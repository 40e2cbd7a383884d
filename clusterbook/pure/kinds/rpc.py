"""The RPC kind: one model split by layers over a head (llama-server) and RPC workers (the reasoning tier)."""

from __future__ import annotations

import posixpath

from clusterbook.model.schema import MLOCK_FLAG_DEPRECATED_BUILD, Cluster, RpcTier
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.flags import Flag
from clusterbook.pure.kinds.base import JobSteps, TierKind, chat_request
from clusterbook.pure.pages import chatapi
from clusterbook.pure.planner.capacity import plan_rpc_tier
from clusterbook.pure.render.artifact import Artifact
from clusterbook.pure.render.escaping import Quoted
from clusterbook.pure.render.tierkit import rpc_port_rules, server_unit, unit


def server_flags(c: Cluster, tier: RpcTier) -> list[Flag]:
    model = c.model(tier.model)
    devices = topo.offload_devices(c, tier)
    ngl = topo.n_gpu_layers(c, tier)
    flags = [
        Flag("--model", posixpath.join(c.storage.models_dir, model.file), "model file",
             f"{model.id}, {model.quantization}"),
        Flag("--alias", model.id, "model id reported by /v1/models and expected in requests",
             "the id clients and the router use"),
    ]
    flags += fl.common_flags(c, tier, "1 is the baseline for pipeline-parallel RPC (fewer bubbles); raise only if "
                                      "bench shows gains", "long prompts on a 72B model take minutes to process")
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


def files(c: Cluster, tier: RpcTier, systemd: bool) -> list[Artifact]:
    """The head's and every worker's unit (systemd), and on every worker the RPC port's firewall rules."""
    out = []
    if systemd:
        out.append(server_unit(c, tier, f"head serving {tier.model} over {len(tier.workers)} RPC worker(s)",
                               server_flags(c, tier)))
    for w in tier.workers:
        if systemd:
            out.append(unit(c, tier, w, "worker_unit", "RPC worker", fl.worker_argv(c, tier, w), tier.worker_systemd,
                            False))
        out += rpc_port_rules(c, tier, w)
    return out


def job(c: Cluster, tier: RpcTier) -> JobSteps:
    """A step per worker, each before the head's."""
    steps = [{"name": f"rpc-worker-{w}", "node": w, "endpoint": endpoint,
              "command": Quoted(fl.shell_line(fl.worker_argv(c, tier, w), "        "))}
             for w, endpoint in zip(tier.workers, topo.rpc_endpoints(c, tier), strict=True)]
    return JobSteps(steps, f"{tier.model} on {tier.head} with RPC workers {', '.join(tier.workers)}", "head")


KIND = TierKind(
    name="rpc", what="split over RPC", restart_order=" (workers, then head)",
    deploys="RPC workers, then the head",
    deploy_order=" (RPC workers first, then the head)", server_word="head", server_flags=server_flags,
    plan=plan_rpc_tier, one_model=True, files=files, job=job,
    http_servers=lambda c, tier: [tier.head], role=lambda tier, node, head: "head" if node == head else "RPC worker",
    request=chat_request, endpoint=chatapi.ENDPOINT, examples=chatapi.chat_examples)
