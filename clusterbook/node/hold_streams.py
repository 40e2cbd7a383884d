# What the gateway's hold reads in a request and its tier's stream: a module hold.py imports, beside it
# (/usr/local/lib/clusterbook/hold_streams.py), not a program.
"""What the gateway's hold reads (hold.py): a request's or an event's JSON within the parser's depth, what one stream
event carries to its client and whether it is the last, and how a cut stream is continued from what its client got."""
import json


class TooDeep(ValueError):
    """A request body nested deeper than Python's parser goes."""


def as_json(data):
    """A request's or an event's JSON object, or None; TooDeep where it nests past the parser's recursion limit (a
    RecursionError, which is no ValueError, ended the thread that met it)."""
    try:
        value = json.loads(data) if data else None
    except RecursionError:
        raise TooDeep("nested too deeply") from None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


SHAPED = ("tools", "functions", "response_format", "grammar", "json_schema")  # an answer held to these cannot be
# continued from a prefill: a tool call's arguments, a format's value would start again or come twice


def uncontinuable(payload):
    """Why a cut stream of this request cannot be continued from what its client got; None when it can: a chat whose
    messages are text, or a completion with a text prompt, with no tools or format to hold its answer to."""
    if payload is None:
        return "its request was too large to read"
    shaped = [k for k in SHAPED if payload.get(k)]
    if shaped:
        return "its request asks for {}".format(", ".join(shaped))
    if isinstance(payload.get("n"), int) and payload["n"] > 1:
        return "its request asks for several choices"
    messages = payload.get("messages")
    if isinstance(messages, list):
        if all(isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role"), str)
               and not m.get("tool_calls") for m in messages):
            return None
        return "its messages are not all plain text (content parts or tool calls)"
    return None if isinstance(payload.get("prompt"), str) else "its prompt is not plain text"


def continuation(payload, sent, tokens, allowed=True):
    """(request, None) that continues a cut stream from what its client got, sent = (answer, reasoning): a chat's
    answer so far as an assistant prefill (a trailing assistant message of the client's own, itself a prefill, is
    extended), with a thinking model's reasoning so far (llama-server continues the reasoning where the answer has
    not begun), or a completion's prompt extended; its token limit less what was sent. (None, why) where it cannot
    be continued, or the route continues no stream (continue_streams: false, where a chat template cannot continue an
    assistant message). A stream cut before anything reached its client (tokens 0) is the request itself, sent
    again: an empty assistant prefill is refused by some chat templates."""
    request, (answer, reasoning) = dict(payload or {}), sent
    if not tokens:
        return request, None
    why = uncontinuable(payload) or (None if allowed else "its route continues no stream")
    if why:
        return None, why
    if isinstance(payload.get("messages"), list):
        messages = list(payload["messages"])
        last = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
        prefill = dict(last or {"role": "assistant"}, content=(last or {}).get("content", "") + answer)
        if reasoning:
            prefill["reasoning_content"] = str((last or {}).get("reasoning_content") or "") + reasoning
        request["messages"] = (messages[:-1] if last else messages) + [prefill]
    else:
        request["prompt"] = payload["prompt"] + answer
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        if isinstance(payload.get(key), int) and payload[key] > 0:
            request[key] = max(1, payload[key] - tokens)
    return request, None


def streamed_text(event):
    """(answer, reasoning, anything) one stream event adds: a chat's delta content and reasoning_content
    (llama-server's reasoning parser puts a thinking model's thoughts there), or a completion's text (llama-server's
    own too); anything: it carried something for the client beyond its role (text, a tool call's delta)."""
    if not event:
        return "", "", False
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        if not isinstance(delta, dict):
            piece = choices[0].get("text")
            return (piece if isinstance(piece, str) else ""), "", bool(piece)
        answer, reasoning = (delta.get(k) if isinstance(delta.get(k), str) else "" for k in
                             ("content", "reasoning_content"))
        return answer, reasoning, bool(answer or reasoning or delta.get("tool_calls") or delta.get("function_call"))
    piece = event.get("content")
    return (piece if isinstance(piece, str) else ""), "", bool(piece)


def last_event(event):
    """An event that ends its stream: a choice with a finish reason, or llama-server's own `stop`."""
    if not event:
        return False
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason") is not None
    return event.get("stop") is True
