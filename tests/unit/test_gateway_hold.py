"""The gateway's hold (clusterbook/node/hold.py) in process: a request its tier cannot answer now waits until the
tier is back and is then answered; a tier still loading (503) is waited for; past the hold, 503 with Retry-After;
a stream passes through as the tier sends it; a path port's prefix is taken off. The SLURM lab test runs it behind
nginx while a worker is killed."""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import io
import json
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

import clusterbook.node

NODE = Path(clusterbook.node.__file__).parent


class Tier(http.server.BaseHTTPRequestHandler):
    """A llama-server: /health 200 (or 503 while `loading`), a completion echoes its path and body, a stream sends
    three events a moment apart and its [DONE]."""

    protocol_version = "HTTP/1.1"
    loading = False

    def do_GET(self):
        status = 503 if self.loading else 200
        body = b'{"status": "ok"}' if status == 200 else b'{"error": "Loading model"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        if self.loading:
            return self.do_GET()
        if b'"stream": true' in data:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in [f"data: {{\"n\": {i}}}\n\n".encode() for i in range(3)] + [b"data: [DONE]\n\n"]:
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            return None
        body = json.dumps({"path": self.path, "got": json.loads(data)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None

    def log_message(self, *args):
        pass


MODULES: dict = {}  # the hold service's module, by its port


def module_of(hold):
    return MODULES[hold[0]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, handler=Tier) -> http.server.ThreadingHTTPServer:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def hold(tmp_path):
    """The hold service on a free port, with one route `reasoning` whose tier listens (when started) on `port`."""
    spec = importlib.util.spec_from_file_location("clusterbook_hold", NODE / "hold.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the service binds first: a port probed and let go before it could have been handed to it (a 404 in CI once)
    service = module.ThreadingServer(("127.0.0.1", 0), module.HoldHandler)
    port = free_port()
    record = tmp_path / "reasoning.json"
    record.write_text(json.dumps({"host": "127.0.0.1", "port": port}))
    module.HoldHandler.routes = {"reasoning": module.Route("reasoning", {
        "backend": None, "record": str(record), "hold_s": 3, "retry_after": 2, "timeout_s": 30,
        "prefix": "/reasoning/"})}
    threading.Thread(target=service.serve_forever, daemon=True).start()
    servers = []
    MODULES[service.server_address[1]] = module
    yield service.server_address[1], port, servers
    service.shutdown()
    for s in servers:
        s.shutdown()
        s.server_close()
    Tier.loading = False


def ask(hold_port: int, body: dict, path: str = "/v1/completions") -> tuple[http.client.HTTPResponse, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", hold_port, timeout=30)
    conn.request("POST", path, json.dumps(body), {"X-Clusterbook-Tier": "reasoning",
                                                  "Content-Type": "application/json"})
    response = conn.getresponse()
    return response, response.read(), time.monotonic() - started


def test_a_request_to_a_tier_that_is_down_waits_and_is_answered_once_it_is_back(hold):
    hold_port, port, servers = hold
    threading.Timer(1.0, lambda: servers.append(start(port))).start()  # the tier comes back after 1 s
    response, body, waited = ask(hold_port, {"prompt": "hi"}, "/reasoning/v1/completions")
    assert response.status == 200 and 1.0 <= waited < 3
    assert json.loads(body) == {"path": "/v1/completions", "got": {"prompt": "hi"}}  # the prefix taken off


def test_the_request_first_in_line_finds_its_tier_back_within_a_tenth_of_a_second(hold):
    """It looks every 0.1 s (the others every 0.5 s, woken by it): a tier back at 1.2 s answers it before 1.45 s,
    where looking every 0.5 s from its first try (0 s) would find it at 1.5 s."""
    hold_port, port, servers = hold
    threading.Timer(1.2, lambda: servers.append(start(port))).start()
    response, _, waited = ask(hold_port, {"prompt": "hi"}, "/reasoning/v1/completions")
    assert response.status == 200 and 1.2 <= waited < 1.45, waited


def test_a_tier_still_loading_is_waited_for(hold):
    hold_port, port, servers = hold
    Tier.loading = True
    servers.append(start(port))
    threading.Timer(1.0, lambda: setattr(Tier, "loading", False)).start()
    response, _, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 200 and waited >= 1.0


def test_a_stream_to_a_tier_still_loading_is_waited_for(hold):
    """A job that has just registered (a new job after an apply, a rollback or a preemption) answers 503 while it
    loads: a stream's first try is held like a plain request's, never passed to the client as 503."""
    hold_port, port, servers = hold
    Tier.loading = True
    servers.append(start(port))
    threading.Timer(1.0, lambda: setattr(Tier, "loading", False)).start()
    response, body, waited = ask(hold_port, {"prompt": "hi", "stream": True})
    assert response.status == 200 and waited >= 1.0
    assert body == b"".join(f"data: {{\"n\": {i}}}\n\n".encode() for i in range(3)) + b"data: [DONE]\n\n"


def test_past_its_hold_a_request_gets_503_with_retry_after(hold):
    hold_port, _, _ = hold
    response, body, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 503 and response.getheader("Retry-After") == "2" and 3 <= waited < 5
    assert "tier reasoning is starting or recovering" in json.loads(body)["error"]["message"]


class QueuedThenDies(Tier):
    """A tier whose queue held the first request past the hold's bound (3 s) before its head died unanswered; it
    loads for 1 s after, then answers."""

    died_at: ClassVar[float | None] = None

    def do_GET(self):
        Tier.loading = QueuedThenDies.died_at is not None and time.monotonic() - QueuedThenDies.died_at < 1
        return super().do_GET()

    def do_POST(self):
        if QueuedThenDies.died_at is None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(3.5)
            QueuedThenDies.died_at = time.monotonic()
            self.connection.shutdown(socket.SHUT_RDWR)  # the head aborts: no answer
            self.close_connection = True
            return None
        return super().do_POST()


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_queued_longer_than_the_hold_is_held_from_when_its_tier_failed_it(hold, stream):
    """beefcake2's reasoning tier has one slot and queues 16 requests: one queued past the hold's bound when the
    head dies is held from then on, not answered 503 at once (the bound counted from its arrival did that)."""
    hold_port, port, servers = hold
    QueuedThenDies.died_at = None
    servers.append(start(port, QueuedThenDies))
    response, body, waited = ask(hold_port, {"prompt": "hi", **({"stream": True} if stream else {})})
    assert response.status == 200 and 4.5 <= waited < 6.5, (response.status, body, waited)


class DiesInItsError(Tier):
    """A router whose model instance SLURM's scancel killed: a 500 begun (its headers only, or part of its body),
    then the router itself gone; after that, a tier that answers."""

    cut: ClassVar[int] = 0
    sent: ClassVar[bytes] = b""

    def do_POST(self):
        if DiesInItsError.cut == 0:
            DiesInItsError.cut += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(500)
            chunked = DiesInItsError.sent.startswith(b"10\r\n")  # the router relays its instance's answer in chunks
            whole = DiesInItsError.sent.startswith(b"proxy error: ")  # the router's own answer, complete
            self.send_header(*(("Transfer-Encoding", "chunked") if chunked else
                               ("Content-Length", str(len(DiesInItsError.sent)) if whole else "100")))
            self.end_headers()
            self.wfile.write(DiesInItsError.sent)
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return None
        return super().do_POST()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sent", [b"", b"proxy erro", b"10\r\nproxy erro", b"proxy error: Connection"])
def test_a_tier_that_dies_in_the_middle_of_an_error_is_held_like_one_that_died_with_the_request(hold, stream, sent):
    """CI once: a stream to the fast tier (a router) while its job was cancelled got nginx's own 503 "without the
    hold": a router relays its instance's 500 in chunks, the hold raised on the cut chunk (IncompleteRead) and answered
    502, which nginx takes for the hold's own failure and sends the request on to the tier without it, which was down.
    A cut 500 of a stated length was passed on to the client as it was, and so was the router's whole 500 "proxy
    error: …" (its instance went away). Now each is held like a request the tier went away with, and answered once the
    tier is back."""
    hold_port, port, servers = hold
    DiesInItsError.cut, DiesInItsError.sent = 0, sent
    servers.append(start(port, DiesInItsError))
    response, body, _ = ask(hold_port, {"prompt": "hi", **({"stream": True} if stream else {})})
    assert response.status == 200 and DiesInItsError.cut == 1, (response.status, body)
    assert body.endswith(b"data: [DONE]\n\n") if stream else json.loads(body)["got"] == {"prompt": "hi"}


def test_while_a_slurm_job_is_away_its_new_job_is_waited_for_and_a_stopped_tier_is_not(hold, tmp_path):
    hold_port, port, servers = hold
    route = module_of(hold).HoldHandler.routes["reasoning"]
    record = Path(route.spec["record"])
    record.unlink()  # preempted: the record goes, the tier stays wanted
    wanted = tmp_path / "llama-reasoning.wanted"
    wanted.touch()
    route.spec.update(new_job_hold_s=6, new_job_retry_after=5, wanted=str(wanted), released=str(tmp_path / "r"))

    def new_job():
        record.write_text(json.dumps({"host": "127.0.0.1", "port": port}))
        servers.append(start(port))
    threading.Timer(4.0, new_job).start()  # after the crash bound (3 s): only the new job's bound holds it
    response, _, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 200 and 4 <= waited < 6
    record.unlink()
    wanted.unlink()  # invoke stop.reasoning: neither wanted nor released
    response, body, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 503 and waited < 1 and "stopped by its operator" in body.decode()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("until, retry", [(3600, "3600"), (None, "5")])  # SLURM's estimate, else the new job's
def test_while_vasps_jobs_hold_a_tiers_nodes_its_requests_get_503_at_once_with_the_estimate(
        hold, tmp_path, stream, until, retry):
    """Issue 64: a tier whose job waits for nodes VASP holds may wait hours: its requests are not held for the new
    job's bound, they are told at once when to come back (the keeper's waiting mark: who, and until when)."""
    hold_port, _, _ = hold
    route = module_of(hold).HoldHandler.routes["reasoning"]
    Path(route.spec["record"]).unlink()  # preempted
    wanted, waiting = tmp_path / "llama-reasoning.wanted", tmp_path / "llama-reasoning.waiting"
    wanted.touch()
    waiting.write_text(json.dumps({"until": time.time() + until + 0.5 if until else None,
                                   "held_by": "alice (vasp)<script>", "since": 0}))
    route.spec.update(new_job_hold_s=1.5, new_job_retry_after=5, wanted=str(wanted), waiting=str(waiting))
    response, body, waited = ask(hold_port, {"prompt": "hi", **({"stream": True} if stream else {})})
    assert response.status == 503 and waited < 1 and response.getheader("Retry-After") == retry
    message = json.loads(body)["error"]["message"]
    assert "waits for its nodes, which other jobs hold (alice (vasp)script)" in message, message
    waiting.unlink()  # the job started: the new job's bound again
    response, _, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 503 and waited >= 1.4 and response.getheader("Retry-After") == "5"


@pytest.mark.parametrize("stream", [False, True])
def test_while_apply_changes_a_tier_its_requests_wait_past_the_crash_bound_until_the_change_is_over(
        hold, tmp_path, stream):
    """apply and rollback mark the tier as changing on the gateway node (effects/change_hold.py): a bad change
    rolled back keeps the tier away longer than a crash's bound and passes through a moment with no
    wanted mark (a stopped tier); its requests wait, and once the mark is gone the usual bound applies again (both
    bounds 1 s here)."""
    hold_port, port, servers = hold
    route = module_of(hold).HoldHandler.routes["reasoning"]
    Path(route.spec["record"]).unlink()
    route.spec.update(hold_s=1, new_job_hold_s=1, new_job_retry_after=2, wanted=str(tmp_path / "w"),
                      released=str(tmp_path / "r"), changing=str(tmp_path / "reasoning.changing"))
    Path(route.spec["changing"]).write_text(f"{int(time.time()) + 30}\n")  # neither wanted nor released: "stopped"

    def back():
        Path(route.spec["record"]).write_text(json.dumps({"host": "127.0.0.1", "port": port}))
        servers.append(start(port))
    threading.Timer(2.0, back).start()  # past both bounds (1 s)
    response, _, waited = ask(hold_port, {"prompt": "hi", "stream": stream})
    assert response.status == 200 and 2.0 <= waited < 4
    Path(route.spec["changing"]).write_text(f"{int(time.time()) - 1}\n")  # a mark nobody removed: its deadline passed
    Path(route.spec["record"]).unlink()
    response, _, waited = ask(hold_port, {"prompt": "hi", "stream": stream})
    assert response.status == 503 and waited < 1  # stopped, and no change in progress: not waited for


def test_a_stream_passes_through_event_by_event(hold):
    hold_port, port, servers = hold
    servers.append(start(port))
    response, body, _ = ask(hold_port, {"prompt": "hi", "stream": True})
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert body == b"".join(f"data: {{\"n\": {i}}}\n\n".encode() for i in range(3)) + b"data: [DONE]\n\n"


class Cutting(Tier):
    """A tier that dies in the middle of its first stream, after two events; the next request (the continuation)
    streams the rest. Every request's body is kept."""

    bodies: ClassVar[list] = []

    def deltas(self, first: bool) -> list[dict]:
        return [{"content": "Hel"}, {"content": "lo"}] if first else [{"content": " wor"}, {"content": "ld"}]

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Cutting.bodies.append(data)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for delta in self.deltas(len(Cutting.bodies) == 1):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"delta": delta}]}).encode() + b"\n\n")
            self.wfile.flush()
        if len(Cutting.bodies) == 1:
            self.connection.shutdown(socket.SHUT_RDWR)  # the head aborts: no [DONE]
            self.close_connection = True
            return
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def test_a_stream_cut_in_the_middle_continues_from_its_text(hold):
    hold_port, port, servers = hold
    Cutting.bodies = []
    servers.append(start(port, Cutting))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Greet"}], "stream": True,
                                        "max_tokens": 10})
    events = [json.loads(line[6:]) for line in body.decode().splitlines()
              if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"]["content"] for e in events) == "Hello world"
    assert ": clusterbook: the tier went away; this stream resumes when it is back" in body.decode()
    assert ": clusterbook: the stream resumed after" in body.decode() and body.decode().endswith("data: [DONE]\n\n")
    assert Cutting.bodies[1]["messages"][-1] == {"role": "assistant", "content": "Hello"}  # the prefill
    assert Cutting.bodies[1]["max_tokens"] == 8  # less the two tokens already sent


class Thinking(Cutting):
    """A thinking model's tier (llama-server's reasoning parser: thoughts in delta.reasoning_content) that dies while
    it thinks; the continuation thinks on, then answers."""

    def deltas(self, first: bool) -> list[dict]:
        return ([{"reasoning_content": "Let"}, {"reasoning_content": " me"}] if first else
                [{"reasoning_content": " think."}, {"content": "Hi"}])


def test_a_thinking_models_stream_cut_while_it_thinks_continues_its_reasoning_not_from_the_start(hold):
    """OR1-Behemoth is Qwen3-based: its thoughts stream as reasoning_content. Its client got "Let me" and no answer;
    continuing with an empty answer alone would make the tier think again from the start (the client would get the
    thoughts twice); the prefill carries the reasoning so far, which llama-server (b11434: continue_final_message's
    AUTO mode) continues."""
    hold_port, port, servers = hold
    Cutting.bodies = []
    servers.append(start(port, Thinking))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Greet"}], "stream": True,
                                 "max_tokens": 10})
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in body.decode().splitlines()
              if line.startswith("data: {")]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Let me think."
    assert "".join(d.get("content", "") for d in deltas) == "Hi"
    assert Cutting.bodies[1]["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": "Let me"}
    assert Cutting.bodies[1]["max_tokens"] == 8


def test_a_route_that_continues_no_stream_ends_a_cut_one_with_an_error_event(hold):
    """continue_streams: false (a model whose chat template cannot continue an assistant message): the client gets
    what was streamed, then an error event, never a silent cut; the tier is not asked to continue."""
    hold_port, port, servers = hold
    module_of(hold).HoldHandler.routes["reasoning"].spec["continue"] = False
    Cutting.bodies = []
    servers.append(start(port, Cutting))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Greet"}], "stream": True})
    assert len(Cutting.bodies) == 1 and "cannot be continued" in body.decode(), body
    assert body.decode().endswith("data: [DONE]\n\n")


def test_a_stream_whose_tier_stays_away_ends_with_an_error_event(hold):
    hold_port, port, servers = hold
    Cutting.bodies = []

    class Gone(Cutting):
        """After its first stream, the tier only ever answers 503 (loading that never ends)."""

        def do_GET(self):
            Tier.loading = bool(Cutting.bodies)
            return super().do_GET()

        def do_POST(self):
            if Cutting.bodies:
                Tier.loading = True
                return Tier.do_GET(self)
            return super().do_POST()
    servers.append(start(port, Gone))
    response, body, waited = ask(hold_port, {"prompt": "Greet", "stream": True})
    text = body.decode()
    assert response.status == 200 and 3 <= waited < 6
    assert '"type": "unavailable_error"' in text and text.endswith("data: [DONE]\n\n")


def test_an_unknown_tier_is_not_held(hold):
    hold_port, _, _ = hold
    conn = http.client.HTTPConnection("127.0.0.1", hold_port, timeout=5)
    conn.request("POST", "/v1/completions", "{}", {"X-Clusterbook-Tier": "nosuch"})
    assert conn.getresponse().status == 404


class ChunkedCut(Cutting):
    """As llama-server does: a chunked stream; its first one broken off without the last chunk."""

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChunkedCut.bodies.append(data)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        first = len(ChunkedCut.bodies) == 1
        for word in (["Hel", "lo"] if first else [" wor", "ld"]):
            event = b"data: " + json.dumps({"choices": [{"delta": {"content": word}, "finish_reason": None}]}
                                           ).encode() + b"\n\n"
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        if first:
            self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk: the head died
            self.close_connection = True
            return
        done = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")


class EmptyFirst(Tier):
    """A head whose worker died under a stream's request: 200, then a complete chunked body with nothing in it; the
    next request streams as usual."""

    streams = 0

    def do_POST(self):
        if EmptyFirst.streams == 0:
            EmptyFirst.streams += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"0\r\n\r\n")
            return None
        return super().do_POST()


def test_a_stream_that_ends_cleanly_with_nothing_in_it_is_sent_again(hold):
    hold_port, port, servers = hold
    EmptyFirst.streams = 0
    servers.append(start(port, EmptyFirst))
    response, body, _ = ask(hold_port, {"prompt": "hi", "stream": True})
    assert response.status == 200
    assert body.endswith(b"".join(f"data: {{\"n\": {i}}}\n\n".encode() for i in range(3)) + b"data: [DONE]\n\n")


def test_a_broken_chunked_stream_is_a_cut_and_continues(hold):
    hold_port, port, servers = hold
    ChunkedCut.bodies = []
    servers.append(start(port, ChunkedCut))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Greet"}], "stream": True})
    events = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"]["content"] for e in events) == "Hello world"
    assert len(ChunkedCut.bodies) == 2 and body.decode().endswith("data: [DONE]\n\n")


class EndsBeforeDone(Cutting):
    """The answer's last event (a finish reason) comes, then the head dies before its [DONE] (bench.faults on the
    systemd lab, 2026-11-29: a stream ended there had no [DONE], and its client counted it failed)."""

    def do_POST(self):
        EndsBeforeDone.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for word, reason in (("Hello", None), ("", "stop")):
            event = b"data: " + json.dumps({"choices": [{"delta": {"content": word}, "finish_reason": reason}]}
                                           ).encode() + b"\n\n"
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def test_a_stream_whose_tier_dies_after_its_last_event_ends_with_done_and_is_not_sent_again(hold):
    hold_port, port, servers = hold
    EndsBeforeDone.bodies = []
    servers.append(start(port, EndsBeforeDone))
    _, body, _ = ask(hold_port, {"messages": [{"role": "user", "content": "Greet"}], "stream": True})
    assert body.decode().endswith("data: [DONE]\n\n") and body.decode().count("[DONE]") == 1, body
    assert len(EndsBeforeDone.bodies) == 1  # the answer was whole: nothing to continue
    assert "resume" not in body.decode()


def test_a_stream_cut_before_its_first_word_is_the_request_sent_again():
    """CI, both labs: the first stream of a run, queued at the head when a worker was killed, was cut before any
    event; its continuation (an empty assistant prefill) was refused and the stream ended with an error event."""
    spec = importlib.util.spec_from_file_location("clusterbook_cont", NODE / "hold.py")
    hold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hold)
    chat = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 400, "stream": True}
    assert hold.continuation(chat, ("", ""), 0) == (chat, None)  # nothing reached the client: the same request
    assert hold.continuation(chat, ("Hi", ""), 1)[0]["messages"][-1] == {"role": "assistant", "content": "Hi"}
    assert hold.continuation(chat, ("Hi", ""), 1)[0]["max_tokens"] == 399
    assert hold.continuation({"prompt": "x", "n_predict": 8}, ("", ""), 0) == ({"prompt": "x", "n_predict": 8}, None)


class Accepting(http.server.ThreadingHTTPServer):
    """A tier's server that numbers its connections in the order it accepted them (its handler threads may start in
    another order on a loaded machine, as llama-server's may: the hold's promise is the order it sends them in)."""

    def process_request(self, request, client_address):
        self.accepted = [*getattr(self, "accepted", []), request]
        super().process_request(request, client_address)


class Recording(Tier):
    """A tier that keeps the order its requests came in: (accepted as which, the request's prompt)."""

    order: ClassVar[list] = []

    def do_POST(self):
        prompt = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["prompt"]
        Recording.order.append((self.server.accepted.index(self.request), prompt))
        self.rfile = io.BytesIO(b'{"prompt": "x"}')
        self.headers.replace_header("Content-Length", "15")
        return super().do_POST()


def test_held_requests_go_back_to_the_tier_in_the_order_they_came():
    """Three requests 0.2 s apart (each in the hold's line before the next: under a loaded CI machine, timers 0.2 s
    apart once arrived out of order) find the tier down; it is back at 1.05 s. Each polls the tier every 0.5 s from its
    own arrival, so the second and third see it first (1.2 s, 1.4 s): they wait for the first (1.5 s), as
    llama-server's queue had them (a request that queued longest is not served last after a crash)."""
    spec = importlib.util.spec_from_file_location("clusterbook_order", NODE / "hold.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    port = free_port()
    module.HoldHandler.routes = {"reasoning": module.Route("reasoning", {
        "backend": f"127.0.0.1:{port}", "hold_s": 5, "retry_after": 2, "timeout_s": 30})}
    service = module.ThreadingServer(("127.0.0.1", 0), module.HoldHandler)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    Recording.order, answers, servers = [], [], []
    route, started, threads = module.HoldHandler.routes["reasoning"], time.monotonic(), []
    for i in range(3):  # each in line before the next is sent: the order they came is the test's, not the scheduler's
        threads.append(threading.Thread(target=lambda i=i: answers.append(ask(service.server_address[1],
                                                                              {"prompt": i}))))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while len(route.line) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    time.sleep(max(0.0, 1.05 - (time.monotonic() - started)))
    servers.append(Accepting(("127.0.0.1", port), Recording))
    threading.Thread(target=servers[0].serve_forever, daemon=True).start()
    for thread in threads:
        thread.join(10)
    while len(answers) < 3:
        time.sleep(0.1)
    service.shutdown()
    servers[0].shutdown()
    order = [prompt for _, prompt in sorted(Recording.order)]
    assert [a[0].status for a in answers] == [200] * 3 and order == [0, 1, 2], Recording.order
