#!/usr/bin/python3
"""clusterbook-alert-journal PORT: Alertmanager's local receiver on the monitoring node, on 127.0.0.1:PORT.

Alertmanager sends it every alert group (its webhook format, version 4) whatever other receivers the cluster file
names, so an alert is seen even where it names none, and nothing invents an address: each alert becomes one line
of this service's journal (`journalctl -u clusterbook-alert-journal`), at the syslog priority of its severity
(critical: 2, warning: 4, info: 6; resolved: 5), with its tier, summary and troubleshooting entries. It also keeps the
alerts firing now, as Alertmanager last told it, for the docs site's status banner: GET /alerts (nginx passes the
site's status.json here where the site is published on this node). `invoke status` asks Prometheus itself.
"""
import http.server
import json
import re
import sys
import threading
import time

PRIORITY = {"critical": 2, "warning": 4, "info": 6}  # journald reads a "<N>" line prefix as the line's priority
RESOLVED = 5
UNSAFE = re.compile(r"[^\w .,:;=()/#+%'@-]")  # what an alert's text may show in the journal (no control characters)


def lines(payload):
    """One journal line per alert of an Alertmanager webhook payload."""
    out = []
    for alert in payload.get("alerts", []) if isinstance(payload, dict) else []:
        labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
        status = str(alert.get("status", "firing"))
        priority = RESOLVED if status == "resolved" else PRIORITY.get(labels.get("severity"), RESOLVED)
        words = ["{} {}".format(status.upper(), labels.get("alertname", "alert"))]
        words += ["{}={}".format(k, labels[k]) for k in ("tier", "instance", "severity", "held_by", "start")
                  if labels.get(k)]
        said = " ".join(words) + ": " + str(notes.get("summary", ""))
        if notes.get("troubleshooting"):
            said += " (troubleshooting: {})".format(notes["troubleshooting"])
        out.append("<{}>{}".format(priority, UNSAFE.sub("?", said)[:400]))
    return out


class Firing:
    """The alerts firing now, by their labels, as the webhooks told them (at most LIMIT)."""

    LIMIT = 500

    def __init__(self):
        self.alerts, self.as_of, self.lock = {}, None, threading.Lock()

    def update(self, payload):
        with self.lock:
            for alert in payload.get("alerts", []) if isinstance(payload, dict) else []:
                labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
                key = json.dumps(labels, sort_keys=True)
                if alert.get("status") == "resolved":
                    self.alerts.pop(key, None)
                elif key in self.alerts or len(self.alerts) < self.LIMIT:
                    self.alerts[key] = {
                        "alert": clean(labels.get("alertname", "alert")), "tier": clean(labels.get("tier", "")),
                        "severity": clean(labels.get("severity", "")), "summary": clean(notes.get("summary", "")),
                        "troubleshooting": clean(notes.get("troubleshooting", "")),
                        "since": clean(alert.get("startsAt", ""))}
            self.as_of = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def json(self):
        with self.lock:
            firing = sorted(self.alerts.values(), key=lambda a: (a["severity"] != "critical", a["alert"], a["tier"]))
            return json.dumps({"as_of": self.as_of, "firing": firing}).encode()


def clean(value):
    return UNSAFE.sub("?", str(value))[:300]


FIRING = Firing()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.split("?")[0] != "/alerts":
            self.send_response(404)
            self.end_headers()
            return
        body = FIRING.json()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            payload = json.loads(self.rfile.read(min(length, 1 << 20)).decode())
        except ValueError:
            self.send_response(400)
            self.end_headers()
            return
        for line in lines(payload):
            print(line, flush=True)
        FIRING.update(payload)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass  # the alerts are the journal's lines, not the requests


def main(port):
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()  # one at a time: each is quick


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: clusterbook-alert-journal PORT")
    main(int(sys.argv[1]))
