"""The gateway's hold (clusterbook/node/wake.py) in process: a request its tier cannot answer now waits until the
tier is back and is then answered; a tier still loading (503) is waited for; past the hold, 503 with Retry-After;
a stream passes through as the tier sends it; a path port's prefix is taken off. The SLURM lab test runs it behind
nginx while a worker is killed."""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import socket
import threading
import time
from pathlib import Path

import pytest

import clusterbook.node

NODE = Path(clusterbook.node.__file__).parent


class Tier(http.server.BaseHTTPRequestHandler):
    """A llama-server: /health 200 (or 503 while `loading`), a completion echoes its path and body, a stream sends
    three events a moment apart."""

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
            for i in range(3):
                event = f"data: {{\"n\": {i}}}\n\n".encode()
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
    spec = importlib.util.spec_from_file_location("clusterbook_wake_hold", NODE / "wake.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    port = free_port()
    record = tmp_path / "reasoning.json"
    record.write_text(json.dumps({"host": "127.0.0.1", "port": port}))
    module.Handler.routes = {"reasoning": module.Route("reasoning", {
        "backend": None, "record": str(record), "hold_s": 3, "retry_after": 2, "timeout_s": 30,
        "prefix": "/reasoning/"})}
    service = module.ThreadingServer(("127.0.0.1", 0), module.Handler)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    servers = []
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


def test_a_tier_still_loading_is_waited_for(hold):
    hold_port, port, servers = hold
    Tier.loading = True
    servers.append(start(port))
    threading.Timer(1.0, lambda: setattr(Tier, "loading", False)).start()
    response, _, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 200 and waited >= 1.0


def test_past_its_hold_a_request_gets_503_with_retry_after(hold):
    hold_port, _, _ = hold
    response, body, waited = ask(hold_port, {"prompt": "hi"})
    assert response.status == 503 and response.getheader("Retry-After") == "2" and 3 <= waited < 5
    assert "tier reasoning is starting or recovering" in json.loads(body)["error"]["message"]


def test_a_stream_passes_through_event_by_event(hold):
    hold_port, port, servers = hold
    servers.append(start(port))
    response, body, _ = ask(hold_port, {"prompt": "hi", "stream": True})
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert body == b"".join(f"data: {{\"n\": {i}}}\n\n".encode() for i in range(3))


def test_an_unknown_tier_is_not_held(hold):
    hold_port, _, _ = hold
    conn = http.client.HTTPConnection("127.0.0.1", hold_port, timeout=5)
    conn.request("POST", "/v1/completions", "{}", {"X-Clusterbook-Tier": "nosuch"})
    assert conn.getresponse().status == 404
