"""The gateway's wake service as rendered, in process: its decisions against marker files and a small HTTP server
that answers /health and /metrics as llama-server does. The SLURM lab test runs it for real behind nginx."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import clusterbook.node
from clusterbook.pure.slurmjob import MARKS

NODE = Path(clusterbook.node.__file__).parent


class Server(http.server.BaseHTTPRequestHandler):
    """/health 200; /metrics with `processing` requests in flight; as a router, /v1/models and per-model metrics."""

    processing = 0

    def do_GET(self):
        if self.path == "/v1/models":  # a router: one model loaded, one not
            body = json.dumps({"data": [{"id": "a", "status": {"value": "loaded"}},
                                        {"id": "b", "status": {"value": "unloaded"}}]})
        elif self.path in ("/metrics", "/metrics?model=a"):
            body = f"llamacpp:requests_processing {self.processing}\nllamacpp:requests_deferred 0\n"
        elif self.path.startswith("/metrics"):
            body = "llamacpp:requests_processing 99\n"  # a model that is not loaded is never asked
        else:
            body = '{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


@pytest.fixture
def wake(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(NODE))  # wake.py imports hold.py from beside it
    spec = importlib.util.spec_from_file_location("clusterbook_wake", NODE / "wake.py")  # a fresh module per test
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    started, touch = [], module.touch

    def touched(path):  # marking the tier wanted is what runs the keeper (its path unit)
        if path.endswith(".wanted"):
            started.append(path)
        touch(path)
    monkeypatch.setattr(module, "touch", touched)
    module.started = started
    return module


def tier(wake, tmp_path, job_id: str, port: int):
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    record = tmp_path / "reasoning.json"
    record.write_text(json.dumps({"tier": "reasoning", "host": "127.0.0.1", "port": port, "job_id": job_id}))
    spec = {"job": "llama-reasoning", "kind": "rpc", "record": str(record), "cap_s": 2,
            "key_file": None,
            "marks": {m: str(markers / f"llama-reasoning.{m}") for m in MARKS}}
    (markers / "llama-reasoning.wanted").touch()
    return wake.Tier("reasoning", spec), markers, record


def age(*paths, seconds: float = 600) -> None:
    for p in paths:
        os.utime(p, (time.time() - seconds, time.time() - seconds))


def test_a_release_waits_for_its_idle_time_and_for_nothing_in_flight(wake, tmp_path, server):
    t, markers, record = tier(wake, tmp_path, "7", server)
    assert t.backend() == f"127.0.0.1:{server}"
    assert t.admit()  # a request just came
    assert t.release(60) == {"released": False, "why": "idle 0 s"}
    age(markers / "llama-reasoning.request", record)
    Server.processing = 1
    try:
        assert t.release(60)["released"] is False  # a long answer still in flight
    finally:
        Server.processing = 0
    done = t.release(60)
    assert done["released"] and done["job_id"] == "7" and done["idle_s"] >= 600
    assert not (markers / "llama-reasoning.wanted").exists()
    assert (markers / "llama-reasoning.released").read_text().splitlines()[1] == "job 7"
    assert t.state()[0] == "released"


def test_a_request_after_the_release_waits_for_a_new_job(wake, tmp_path, server):
    t, markers, record = tier(wake, tmp_path, "7", server)
    age(record)
    assert t.release(5)["released"]
    assert t.backend() is None  # the released job still answers /health while it ends: never again
    assert t.admit() and wake.started == [str(markers / "llama-reasoning.wanted")]
    assert (markers / "llama-reasoning.wanted").exists() and not (markers / "llama-reasoning.released").exists()
    assert t.backend() is None and t.state()[0] == "starting"  # job 7's record is still there
    record.write_text(json.dumps({"tier": "reasoning", "host": "127.0.0.1", "port": server, "job_id": "8"}))
    assert t.backend() == f"127.0.0.1:{server}" and t.state()[0] == "serving"


def test_concurrent_first_requests_wake_the_tier_once(wake, tmp_path, server):
    t, _, record = tier(wake, tmp_path, "7", server)
    age(record)
    assert t.release(5)["released"]
    with ThreadPoolExecutor(max_workers=10) as pool:
        assert all(pool.map(lambda _: t.admit(), range(10)))
    assert len(wake.started) == 1


def test_a_stopped_tier_is_not_started_by_a_request(wake, tmp_path, server):
    t, markers, _ = tier(wake, tmp_path, "7", server)
    (markers / "llama-reasoning.wanted").unlink()  # invoke stop.reasoning: neither wanted nor released
    assert t.admit() is False and wake.started == [] and t.state()[0] == "stopped"
    assert t.release(5) == {"released": False, "why": "not serving"}


def test_a_router_tier_counts_the_requests_of_its_loaded_models(wake, tmp_path, server):
    t, markers, record = tier(wake, tmp_path, "7", server)
    t.spec["kind"] = "router"
    backend = t.backend()
    assert t.in_flight(backend) == 0
    Server.processing = 2
    try:
        assert t.in_flight(backend) == 2
        age(markers / "llama-reasoning.wanted", record)
        assert t.release(5) == {"released": False, "why": "in flight: 2"}
    finally:
        Server.processing = 0


def test_a_mark_another_user_left_is_replaced_not_refused(wake, tmp_path, monkeypatch):
    """The hold service runs as its own user: a request mark a root deploy left is not its to change, but the folder
    is its group's, so it replaces the file."""
    mark = tmp_path / "llama-reasoning.request"
    mark.write_text("")
    age(mark)
    utime = wake.os.utime

    def refused(path, times=None):
        if not getattr(refused, "once", False):
            refused.once = True
            raise PermissionError(1, "Operation not permitted", str(path))
        return utime(path, times)
    monkeypatch.setattr(wake.os, "utime", refused)
    wake.touch(str(mark))
    assert mark.exists() and time.time() - mark.stat().st_mtime < 60
