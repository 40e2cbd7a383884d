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
