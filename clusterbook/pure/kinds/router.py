"""The router kind: llama-server in router mode on one node, models loaded on demand (the fast tier)."""

from __future__ import annotations

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, RouterTier
from clusterbook.pure import layout
from clusterbook.pure import topology as topo
from clusterbook.pure.flags import Flag, common_flags
from clusterbook.pure.kinds.base import JobSteps, TierKind, chat_request
from clusterbook.pure.layout import path as at
from clusterbook.pure.pages import chatapi
from clusterbook.pure.planner.capacity import plan_one_node
from clusterbook.pure.render.artifact import Artifact, header, template
from clusterbook.pure.render.tierkit import server_unit


def server_flags(c: Cluster, tier: RouterTier) -> list[Flag]:
    return [
        Flag("--models-preset", layout.models_preset_path(c, tier), "router mode: models this server may load",
             f"generated from tier {tier.name}'s model list: " + ", ".join(tier.models)),
        Flag("--models-max", str(tier.models_max), "models resident at once; the least recently used unloads",
             "what fits the node's GPU memory (see the capacity plan)"),
        *common_flags(c, tier, "concurrent requests per loaded model", "server default made explicit"),
        Flag("--n-gpu-layers", str(topo.FULL_OFFLOAD), "layers offloaded to the GPU (inherited by each model)",
             "every model of this tier fits one GPU"),
    ]


def files(c: Cluster, tier: RouterTier, systemd: bool) -> list[Artifact]:
    """The server's unit (systemd) and the models preset on every node that may run it."""
    role = f"router mode, models on demand ({', '.join(tier.models)})"
    out = [server_unit(c, tier, role, server_flags(c, tier))] if systemd else []
    preset = template("models-preset.ini.j2", header=header(c), tier=tier, models_dir=c.storage.models_dir,
                      models=[c.model(m) for m in tier.models])
    return out + [Artifact(n, at(c, "models_preset", tier), preset, "ini", about=f"{tier.name}: models",
                           id="models_preset", tier=tier.name) for n in candidate_nodes(c, tier)]


def job(c: Cluster, tier: RouterTier) -> JobSteps:
    return JobSteps([], f"router mode on {tier.node}", "server")


KIND = TierKind(
    name="router", what="router mode", restart_order="", deploys="router mode, models on demand",
    deploy_order="", server_word="router",
    server_flags=server_flags,
    plan=lambda c, tier, shape: plan_one_node(c, tier), one_model=False, files=files, job=job,
    http_servers=candidate_nodes, role=lambda tier, node, head: "router mode",
    request=chat_request, endpoint=chatapi.ENDPOINT, examples=chatapi.chat_examples)
