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
    assert firing(port) == {"as_of": None, "firing": []}  # told nothing yet: the banner says so, not "all well"
    assert post(port, json.dumps(PAYLOAD).encode()) == 200
    now = firing(port)
    assert now["as_of"] and now["firing"] == [{
        "alert": "TierDown", "tier": "reasoning", "severity": "critical",
        "summary": "reasoning does not answer /health", "troubleshooting": "rpc-worker-down, gpu", "since": ""}]
    resolved = {"alerts": [dict(PAYLOAD["alerts"][0], status="resolved")]}
    assert post(port, json.dumps(resolved).encode()) == 200
    assert firing(port)["firing"] == []
    hostile = {"alerts": [{"status": "firing", "labels": {"alertname": "<script>x</script>\x1b"}, "annotations": {}}]}
    assert post(port, json.dumps(hostile).encode()) == 200
    assert firing(port)["firing"][0]["alert"] == "?script?x?/script??"  # shown as text by the banner as well
