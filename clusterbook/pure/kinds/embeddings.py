"""The embeddings kind: llama-server with one embedding model on one node, one vector for each input at
/v1/embeddings (pooled by the tier's --pooling)."""

from __future__ import annotations

import json
import posixpath
from dataclasses import replace

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.schema import Cluster, EmbeddingsTier
from clusterbook.pure import topology as topo
from clusterbook.pure.flags import Flag, common_flags
from clusterbook.pure.kinds.base import JobSteps, TierKind
from clusterbook.pure.pages.chatapi import client_retries, example_request
from clusterbook.pure.pages.markdown import code
from clusterbook.pure.planner.capacity import plan_one_node
from clusterbook.pure.render.artifact import Artifact
from clusterbook.pure.render.tierkit import server_unit


def server_flags(c: Cluster, tier: EmbeddingsTier) -> list[Flag]:
    model = c.model(tier.model)
    return [
        Flag("--model", posixpath.join(c.storage.models_dir, model.file), "model file",
             f"{model.id}, {model.quantization}"),
        Flag("--alias", model.id, "model id reported by /v1/models and expected in requests",
             "the id clients use"),
        Flag("--embeddings", None, "serve /v1/embeddings: one vector for each input", "an embeddings tier"),
        Flag("--pooling", tier.pooling, "how the tokens' vectors become the input's one", "the tier's pooling"),
        *common_flags(c, tier, "requests embedded at once", "server default made explicit"),
        Flag("--batch-size", str(tier.batch_size), "logical batch: tokens of one request's inputs read together",
             "as configured"),
        Flag("--ubatch-size", str(tier.ubatch_size), "physical batch: the longest input it embeds",
             "an input must fit one physical batch"),
        Flag("--n-gpu-layers", str(topo.FULL_OFFLOAD), "layers offloaded to the GPU", "the model fits one node"),
        Flag("--metrics", None, "enable the Prometheus /metrics endpoint", "monitoring reads it"),
    ]


def files(c: Cluster, tier: EmbeddingsTier, systemd: bool) -> list[Artifact]:
    """The server's unit (systemd); nothing else of its own."""
    return [server_unit(c, tier, f"embeddings of {tier.model} ({tier.pooling} pooling)",
                        server_flags(c, tier))] if systemd else []


def job(c: Cluster, tier: EmbeddingsTier) -> JobSteps:
    return JobSteps([], f"embeddings of {tier.model} on {tier.node}", "server")


def plan(c: Cluster, tier: EmbeddingsTier, shape):
    """Its memory on one node as router mode's with its physical batch; no decode bound (it generates no token)."""
    one = plan_one_node(c, tier, {tier.model: shape} if shape else None, ubatch=tier.ubatch_size)
    return replace(one, decode_bound_tps=None, decode_bound_full_ctx_tps=None,
                   notes=[f"one vector per input: its longest input is {tier.ubatch_size:,} tokens (ubatch_size)"])


def examples(c: Cluster, tier: EmbeddingsTier, recovery_s: float | None) -> dict[str, str]:
    """The API page's tabs: two inputs embedded in curl and through the `openai` client, and the answer's shape."""
    url, model, _, key = example_request(c, tier)
    inputs = ["first text", "second text"]
    auth = ' \\\n  -H "Authorization: Bearer $KEY"' if key else ""
    key_line = f"KEY=...  # the tier's API key: {key}\n" if key else ""
    curl = code(f"{key_line}curl -s {url}/v1/embeddings \\\n  -H 'Content-Type: application/json'{auth} \\\n"
                f"  -d '{json.dumps({'model': model, 'input': inputs})}'")
    api_key = 'os.environ["KEY"]' if key else '"none"'
    retries = f", max_retries={client_retries(recovery_s)}" if recovery_s else ""
    python = code("\n".join((["import os", ""] if key else []) + [
        "from openai import OpenAI", "", f"client = OpenAI(base_url={json.dumps(url + '/v1')}, api_key={api_key}"
        f"{retries})", f"vectors = client.embeddings.create(model={json.dumps(model)}, input={json.dumps(inputs)})",
        "print([len(d.embedding) for d in vectors.data])  # one vector per input"]), "python")
    answer = {"object": "list", "model": model, "usage": {"prompt_tokens": "<n>", "total_tokens": "<n>"},
              "data": [{"object": "embedding", "index": i, "embedding": ["<float>", "..."]} for i in (0, 1)]}
    return {"curl": curl, "Python (openai)": python, "Example response": code(json.dumps(answer, indent=2), "json")}


def request(model: str) -> tuple[str, dict]:
    """The probe's and the scenarios' one request: an embedding of one short input."""
    return "/v1/embeddings", {"model": model, "input": "Say OK."}


KIND = TierKind(
    name="embeddings", what="embeddings", restart_order="", deploys="one embedding model", deploy_order="",
    server_word="embeddings", server_flags=server_flags, plan=plan, one_model=True, files=files, job=job,
    http_servers=candidate_nodes, role=lambda tier, node, head: "embeddings", request=request,
    endpoint=("/v1/embeddings", "one vector for each input (OpenAI-compatible embeddings)"), examples=examples)
