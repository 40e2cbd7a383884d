"""A chat tier's API examples (router and RPC kinds): a chat completion in curl and through the `openai` client,
streamed and not, the answer's shape, and the client's retries that outlast a recovery."""

from __future__ import annotations

import json
import math

from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import topology as topo
from clusterbook.pure.pages.markdown import code
from clusterbook.pure.planner.loadtime import whole_s

ENDPOINT = ("/v1/chat/completions", "OpenAI-compatible chat completion")


def example_request(c: Cluster, tier: Tier) -> tuple[str, str, int, str]:
    """(base URL, model id, max_tokens, where the API key is found or "") of a tier's examples."""
    model = tier.served_models[0]
    url = topo.client_url(c, tier)
    key = ""
    if tier.api_key:
        key = f"the file {tier.api_key.file}" if tier.api_key.file else f"${tier.api_key.env}"
    # a reasoning model writes its chain of thought first: the seeds advise 500 tokens or more
    tokens = 500 if c.model(model).reasoning_content else 100
    return url, model, tokens, key


def curl_example(c: Cluster, tier: Tier, stream: bool = False) -> str:
    url, model, tokens, key = example_request(c, tier)
    auth = ' \\\n  -H "Authorization: Bearer $KEY"' if key else ""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": tokens}
    if stream:
        body["stream"] = True
    key_line = f"KEY=...  # the tier's API key: {key}\n" if key else ""
    return code(f"{key_line}curl -s{'N' if stream else ''} {url}/v1/chat/completions \\\n"
                f"  -H 'Content-Type: application/json'{auth} \\\n  -d '{json.dumps(body)}'")


def client_retries(seconds: float) -> int:
    """Retries the openai client needs to outlast `seconds`: it waits 0.5, 1, 2, 4, then at most 8 s between tries
    (Retry-After instead when that is 60 s or less)."""
    return 4 + max(0, math.ceil((seconds - 7.5) / 8))


def python_example(c: Cluster, tier: Tier, recovery_s: float | None, stream: bool = False) -> str:
    """The same request through the `openai` client; with retries that outlast the tier's predicted recovery."""
    url, model, tokens, key = example_request(c, tier)
    lines = (["import os", ""] if key else []) + ["from openai import OpenAI", ""]
    lines.append(f"# the tier's API key ({key}) in the environment as KEY" if key else
                 "# the tier needs no key, but the client wants one")
    api_key = 'os.environ["KEY"]' if key else '"none"'
    options = f"base_url={json.dumps(url + '/v1')}, api_key={api_key}"
    if recovery_s:
        lines.append(f"# max_retries: the client's backoff outlasts a recovery of about {whole_s(recovery_s)} s")
        options += f", max_retries={client_retries(recovery_s)}"
    lines += ["client = OpenAI(" + ",\n                ".join(options.split(", ")) + ")"]
    call = (f"client.chat.completions.create(model={json.dumps(model)}, max_tokens={tokens},\n"
            '    messages=[{"role": "user", "content": "Hello!"}]' + (", stream=True)" if stream else ")"))
    reasoning = c.model(model).reasoning_content
    if stream:
        lines += [f"for chunk in {call}:", "    delta = chunk.choices[0].delta"]
        shown = 'getattr(delta, "reasoning_content", None) or delta.content' if reasoning else "delta.content"
        lines += [f'    print({shown} or "", end="", flush=True)']
    else:
        lines += [f"reply = {call}"]
        if reasoning:
            lines += ['print(getattr(reply.choices[0].message, "reasoning_content", None))  # the chain of thought']
        lines += ["print(reply.choices[0].message.content)"]
    return code("\n".join(lines), "python")


def example_response(c: Cluster, tier: Tier) -> str:
    """The shape of llama-server's answer to a non-streamed chat completion, with the tier's model id."""
    model = tier.served_models[0]
    message = {"role": "assistant", "content": "<the answer>"}
    if c.model(model).reasoning_content:
        message["reasoning_content"] = "<the chain of thought>"
    body = {"choices": [{"finish_reason": "stop", "index": 0, "message": message}], "created": "<unix time>",
            "model": model, "system_fingerprint": f"b{c.engine.build}-...", "object": "chat.completion",
            "usage": {"completion_tokens": "<n>", "prompt_tokens": "<n>", "total_tokens": "<n>"},
            "id": "chatcmpl-...", "timings": {"prompt_n": "<n>", "prompt_ms": "<ms>", "prompt_per_second":
                                              "<tokens/s>", "predicted_n": "<n>", "predicted_ms": "<ms>",
                                              "predicted_per_second": "<tokens/s>"}}
    return code(json.dumps(body, indent=2), "json")


def chat_examples(c: Cluster, tier: Tier, recovery_s: float | None) -> dict[str, str]:
    """The API page's tabs for a chat tier (the first, curl, is also the home page's quick start)."""
    return {"curl": curl_example(c, tier), "Python (openai)": python_example(c, tier, recovery_s),
            "Streaming (curl)": curl_example(c, tier, stream=True),
            "Streaming (Python)": python_example(c, tier, recovery_s, stream=True),
            "Example response": example_response(c, tier)}
