"""What a client sends cannot hurt the gateway's hold (issue 65): bodies over its limit, nested too deep or of no
stated length are refused by the hold itself; streams it cannot continue stream from their first byte and end with
one error event when cut, never sent again from their start; a request that failed the tier twice is not sent a
third time; a held request whose client left is dropped; at most its cap of requests is held; a stale change mark or
an endpoint record naming another host is not trusted; whatever fails in a request's thread is answered."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from typing import ClassVar

import pytest

from .test_gateway_hold import Cutting, Tier, ask, hold, module_of, start  # noqa: F401  (hold: the fixture)


def raw(hold_port: int, head: bytes, body: bytes = b"") -> tuple[int, dict]:
    """Send a hand-made request; (status, JSON body) of the answer."""
    with socket.create_connection(("127.0.0.1", hold_port), timeout=10) as s:
        s.sendall(head + body)
        response = http.client.HTTPResponse(s)
        response.begin()
        return response.status, json.loads(response.read() or b"{}")


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Clusterbook-Tier: reasoning\r\n"


@pytest.mark.parametrize("headers, body, status, words", [
    (b"Content-Length: 2001\r\n", b"x" * 2001, 413, "over the gateway's limit"),
    (b"Content-Length: -5\r\n", b"", 400, "Content-Length is not a number"),
    (b"Content-Length: 12x\r\n", b"", 400, "Content-Length is not a number"),
    (b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n", 411, "needs a Content-Length"),
    (b"Content-Length: 1897\r\n", b'{"a": ' + b"[" * 1890 + b"\n", 400, "nested too deeply"),
])
def test_a_body_the_hold_refuses_gets_its_own_clear_error_and_never_reaches_the_tier(hold, headers, body, status,
                                                                                      words):
    hold_port, port, servers = hold
    module_of(hold).HoldHandler.body_max = 2000
    Cutting.bodies = []
    servers.append(start(port, Cutting))
    got, answer = raw(hold_port, HEAD + headers + b"\r\n", body)
    assert got == status and words in answer["error"]["message"], answer
    assert Cutting.bodies == []
    assert ask(hold_port, {"prompt": "hi"})[0].status == 200  # and the hold goes on serving


def test_a_body_that_stops_coming_is_answered_when_its_time_is_up(hold):
    hold_port, _, _ = hold
    module_of(hold).HoldHandler.timeout = 1
    try:
        started = time.monotonic()
        got, answer = raw(hold_port, HEAD + b"Content-Length: 100\r\n\r\n", b'{"prompt": ')
        assert got == 400 and "ended before" in answer["error"]["message"] and time.monotonic() - started < 5
    finally:
        module_of(hold).HoldHandler.timeout = 60


class ToolCall(Cutting):
    """A tier that streams a tool call's arguments and dies in the middle of them."""

    def deltas(self, first: bool) -> list[dict]:
        call = [{"index": 0, "id": "c1", "type": "function",
                 "function": {"name": "read", "arguments": '{"path": "src/'}}]
        return [{"role": "assistant", "content": None}, {"tool_calls": call}] if first else [{"content": "again"}]


@pytest.mark.parametrize("extra, why", [
    ({"tools": [{"type": "function", "function": {"name": "read"}}]}, "asks for tools"),
    ({"response_format": {"type": "json_object"}}, "asks for response_format"),
])
def test_a_cut_stream_with_tools_or_a_format_ends_with_one_error_event_and_is_not_sent_again(hold, extra, why):
    """A cut tool-call stream was sent again from its start: the client's arguments read
    `{"path": "src/{"path": "src/main.rs", …}`."""
    hold_port, port, servers = hold
    Cutting.bodies = []
    servers.append(start(port, ToolCall))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Read it"}], "stream": True, **extra},
                     "/v1/chat/completions")
    text = body.decode()
    assert len(Cutting.bodies) == 1, Cutting.bodies  # never sent again
    assert text.count('"tool_calls"') == 1 and text.count('"error"') == 1 and why in text, text
    assert text.endswith("data: [DONE]\n\n") and "again" not in text


class Slow(Tier):
    """A tier whose stream sends one event, then thinks for a second before the rest."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, pause in ((0, 1.0), (1, 0)):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"delta": {"content": str(i)}}]}).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(pause)
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],  # content parts
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
     {"role": "tool", "content": "42", "tool_call_id": "c1"}],  # a coding agent's second turn
])
def test_a_stream_the_hold_cannot_continue_still_streams_from_its_first_byte(hold, messages):
    """Such requests went through the non-stream path: the client saw nothing until the tier's whole answer."""
    hold_port, port, servers = hold
    servers.append(start(port, Slow))
    conn = http.client.HTTPConnection("127.0.0.1", hold_port, timeout=10)
    started = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps({"messages": messages, "stream": True}),
                 {"X-Clusterbook-Tier": "reasoning", "Content-Type": "application/json"})
    response = conn.getresponse()
    first = response.readline()
    assert first.startswith(b"data: ") and time.monotonic() - started < 0.8
    assert response.read().endswith(b"data: [DONE]\n\n")


def test_a_trailing_assistant_message_is_extended_not_followed_by_a_second_one():
    import importlib.util

    from .test_gateway_hold import NODE
    spec = importlib.util.spec_from_file_location("clusterbook_prefill", NODE / "hold.py")
    hold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hold)
    chat = {"messages": [{"role": "user", "content": "List"}, {"role": "assistant", "content": "1."}],
            "stream": True}
    request, why = hold.continuation(chat, (" apples", ""), 2)
    assert why is None and request["messages"] == [{"role": "user", "content": "List"},
                                                   {"role": "assistant", "content": "1. apples"}]
    assert hold.continuation({**chat, "n": 2}, ("x", ""), 1) == (None, "its request asks for several choices")
    assert hold.continuation(chat, ("x", ""), 1, allowed=False) == (None, "its route continues no stream")


class Fatal(Tier):
    """A request that crashes the tier: it reads it and dies without answering (and is back at once)."""

    posts: ClassVar[int] = 0

    def do_POST(self):
        Fatal.posts += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


class InstanceGone(Fatal):
    """A router whose model instance such a request kills each time: the router's own 500 "proxy error: …"."""

    def do_POST(self):
        Fatal.posts += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(500)
        self.send_header("Content-Length", "23")
        self.end_headers()
        self.wfile.write(b"proxy error: Connection")


@pytest.mark.parametrize("tier", [Fatal, InstanceGone])
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_failed_the_tier_three_times_is_not_sent_again(hold, stream, tier):
    """Each time, every user of the tier paid the recovery; it was sent again until the hold ran out."""
    hold_port, port, servers = hold
    Fatal.posts = 0
    servers.append(start(port, tier))
    response, body, _ = ask(hold_port, {"prompt": "poison", "stream": stream})
    # 500, not 502: nginx takes a 502 from the hold for the hold's own failure and would send the request to the
    # tier itself, a fourth time (fresh-clone CI: two clients of a double fault got nginx's 503 that way)
    assert Fatal.posts == 3 and response.status == 500, body
    assert "failed 3 times while answering this request" in body.decode()


def test_nginx_passes_the_holds_500_on_unchanged():
    """The other half of the rule above: no error_page of beefcake2's gateway takes a 500 (the hold's refusal) for a
    failure of its own and sends the request on."""
    import re
    from pathlib import Path

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure import layout
    from clusterbook.pure.render.artifacts import render_artifacts

    c = load_cluster(Path(__file__).resolve().parents[2] / "cluster.yaml")
    site = next(a.text for a in render_artifacts(c) if a.path in (layout.NGINX_SITE, layout.NGINX_SITE_EL))
    pages = re.findall(r"error_page ([\d ]+)=", site)
    assert pages and all("500" not in codes.split() for codes in pages), pages


def test_at_most_its_cap_of_requests_is_held_and_one_whose_client_left_is_dropped(hold):
    hold_port, port, servers = hold
    module = module_of(hold)
    module.HoldHandler.slots = module.threading.BoundedSemaphore(1)
    try:
        leaving = socket.create_connection(("127.0.0.1", hold_port))  # the tier is down: this one is held
        body = b'{"prompt": "first"}'
        leaving.sendall(HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.5)
        response, answer, waited = ask(hold_port, {"prompt": "second"})
        assert response.status == 503 and waited < 1 and response.getheader("Retry-After") == "1", answer
        leaving.close()  # its client left: its slot is free within a look
        time.sleep(1.0)
        Recorded.prompts = []
        servers.append(start(port, Recorded))
        response, _, _ = ask(hold_port, {"prompt": "third"})
        assert response.status == 200 and Recorded.prompts == ["third"]  # the first was never sent
    finally:
        module.HoldHandler.slots = module.threading.BoundedSemaphore(64)


class Recorded(Tier):
    prompts: ClassVar[list] = []

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        Recorded.prompts.append(json.loads(data)["prompt"])
        self.rfile = __import__("io").BytesIO(data)
        return super().do_POST()


def test_a_change_mark_holds_at_most_its_timeout_from_when_it_was_written(hold, tmp_path):
    module = module_of(hold)
    route = module.HoldHandler.routes["reasoning"]
    mark = tmp_path / "reasoning.changing"
    route.spec["changing"] = str(mark)
    mark.write_text("99999999999\n")  # forever, as a forged or damaged mark would say
    assert 29 < route.changing_s() <= 30  # the tier's timeout from now: it was just written
    old = time.time() - 31
    os.utime(mark, (old, old))  # left by an apply that was killed 31 s ago
    assert route.changing_s() == 0
    mark.write_text("nan\n")
    assert route.changing_s() == 0


def test_an_endpoint_record_naming_another_host_is_not_followed(hold, tmp_path):
    """A record is anyone's who can write the shared folder: one naming another host received a client's prompt and
    its Authorization header."""
    hold_port, port, servers = hold
    module = module_of(hold)
    route = module.HoldHandler.routes["reasoning"]
    route.spec["hosts"] = ["10.214.0.11", "slab1"]
    servers.append(start(port))
    response, body, _ = ask(hold_port, {"prompt": "secret"})  # 127.0.0.1 is no node of the tier
    assert response.status == 503, body
    route.spec["hosts"].append("127.0.0.1")
    assert ask(hold_port, {"prompt": "hi"})[0].status == 200


def test_whatever_fails_in_a_requests_thread_is_answered(hold):
    hold_port, _, _ = hold
    route = module_of(hold).HoldHandler.routes["reasoning"]

    def broken():
        raise KeyError("hold_s")
    route.bound = broken
    response, body, _ = ask(hold_port, {"prompt": "hi"})
    assert response.status == 502 and "hold failed on this request (KeyError)" in body.decode()

