"""The alert journal (clusterbook/node/alert_journal.py), run as the monitoring node runs it: Alertmanager's webhook
posts become one journal line per alert at its severity's priority, with tier, summary and entries; text that is
not an alert's (control characters, a bad body) never reaches the journal."""

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import clusterbook.node

PROGRAM = Path(clusterbook.node.__file__).parent / "alert_journal.py"
PAYLOAD = {"version": "4", "status": "firing", "alerts": [
    {"status": "firing", "labels": {"alertname": "TierDown", "tier": "reasoning", "severity": "critical"},
     "annotations": {"summary": "reasoning does not answer /health", "troubleshooting": "rpc-worker-down, gpu"}},
    {"status": "resolved", "labels": {"alertname": "DecodeSlow", "tier": "fast", "severity": "warning"},
     "annotations": {"summary": "decode below\x1b[31m target\nFAKE line"}},
]}


@pytest.fixture
def journal():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(PROGRAM), str(port)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield port, process
    process.kill()


def post(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/", body, {"Content-Type": "application/json"})
    return conn.getresponse().status


def test_each_alert_is_one_journal_line_at_its_severity(journal):
    port, process = journal
    assert post(port, json.dumps(PAYLOAD).encode()) == 200
    assert post(port, b"not json") == 400
    process.kill()
    out = process.stdout.read().splitlines()
    assert out == [
        "<2>FIRING TierDown tier=reasoning severity=critical: reasoning does not answer /health "
        "(troubleshooting: rpc-worker-down, gpu)",
        "<5>RESOLVED DecodeSlow tier=fast severity=warning: decode below??31m target?FAKE line"]


def firing(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/alerts")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Cache-Control") == "no-store"
    return json.loads(response.read())


def test_the_alerts_firing_now_are_kept_for_the_sites_banner_until_resolved(journal):
    port, _ = journal
    told_nothing = {"as_of": None, "firing": [], "not_kept": 0}  # the banner says so, not "all well"
    assert firing(port) == told_nothing
    assert post(port, json.dumps(PAYLOAD).encode()) == 200
    now = firing(port)
    assert now["as_of"] and now["firing"] == [{
        "alert": "TierDown", "tier": "reasoning", "node": "", "severity": "critical",
        "summary": "reasoning does not answer /health", "troubleshooting": "rpc-worker-down, gpu", "since": ""}]
    xid = {"alerts": [{"status": "firing", "labels": {"alertname": "GpuXidError", "node": "vasp-02",
                                                      "severity": "critical"}, "annotations": {}}]}
    assert post(port, json.dumps(xid).encode()) == 200  # issue 67: the banner says which node fired it
    assert next(a for a in firing(port)["firing"] if a["alert"] == "GpuXidError")["node"] == "vasp-02"
    assert post(port, json.dumps({"alerts": [dict(xid["alerts"][0], status="resolved")]}).encode()) == 200
    resolved = {"alerts": [dict(PAYLOAD["alerts"][0], status="resolved")]}
    assert post(port, json.dumps(resolved).encode()) == 200
    assert firing(port)["firing"] == []
    hostile = {"alerts": [{"status": "firing", "labels": {"alertname": "<script>x</script>\x1b"}, "annotations": {}}]}
    assert post(port, json.dumps(hostile).encode()) == 200
    assert firing(port)["firing"][0]["alert"] == "?script?x?/script??"  # shown as text by the banner as well


@pytest.mark.parametrize("body, status", [
    (b'{"alerts": null}', 400),
    (b'{"alerts": [{"labels": ["alertname", "TierDown"]}]}', 400),
    (b'{"alerts": [{"labels": {"alertname": {"nested": 1}}}]}', 400),
    (b'{"alerts": "' + b"x" * 10 + b'"}', 400),
    (b"[" * 100000, 400),  # nested past the parser's depth: a traceback before
])
def test_a_webhook_that_is_not_alertmanagers_is_refused_whole_and_the_journal_goes_on(journal, body, status):
    """Issue 65: malformed webhooks ended in tracebacks; now 400, nothing written, the next webhook served."""
    port, process = journal
    assert post(port, body) == status
    assert post(port, json.dumps(PAYLOAD).encode()) == 200
    process.kill()
    assert [line.split()[0] for line in process.stdout.read().splitlines()] == ["<2>FIRING", "<5>RESOLVED"]


def test_a_client_that_sends_half_a_body_or_a_bad_length_holds_no_webhook_up(journal):
    """Issue 65: a single-threaded server without time limits: half a body blocked Alertmanager's webhooks and the
    banner."""
    port, _ = journal
    stuck = socket.create_connection(("127.0.0.1", port))
    stuck.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"alerts\": [")
    for length in (b"-1", b"abc"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as bad:
            bad.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n")
            assert bad.recv(100).startswith(b"HTTP/1.0 411")
    started = time.monotonic()
    assert post(port, json.dumps(PAYLOAD).encode()) == 200 and time.monotonic() - started < 2
    assert firing(port)["firing"][0]["alert"] == "TierDown"
    stuck.close()


def test_past_its_limit_a_critical_alert_takes_another_ones_place_and_what_is_not_kept_is_counted(journal):
    """Issue 65: once 500 alerts were kept a real critical alert was dropped silently; each kept its labels whole
    (300 alerts of 1 MB: +299 MB); now a digest and clipped values."""
    port, process = journal
    noise = {"alerts": [{"status": "firing", "labels": {"alertname": "Noise", "n": str(i), "pad": "x" * 1000},
                         "annotations": {}} for i in range(501)]}
    assert post(port, json.dumps(noise).encode()) == 200
    assert post(port, json.dumps(PAYLOAD).encode()) == 200
    now = firing(port)
    assert len(now["firing"]) == 500 and now["not_kept"] == 2, now["not_kept"]  # one noise, and the one it replaced
    assert now["firing"][0]["alert"] == "TierDown" and now["firing"][0]["severity"] == "critical"
    process.kill()
    assert any("not kept for the status banner" in line for line in process.stdout.read().splitlines())
