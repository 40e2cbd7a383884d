#!/usr/bin/python3
"""clusterbook-alert-journal PORT: Alertmanager's local receiver on the monitoring node, on 127.0.0.1:PORT.

Alertmanager sends it every alert group (its webhook format, version 4) whatever other receivers the cluster file
names, so an alert is seen even where it names none, and nothing invents an address: each alert becomes one line
of this service's journal (`journalctl -u clusterbook-alert-journal`), at the syslog priority of its severity
(critical: 2, warning: 4, info: 6; resolved: 5), with its tier, summary and troubleshooting entries. It also keeps the
alerts firing now, as Alertmanager last told it, for the docs site's status banner: GET /alerts (nginx passes the
site's status.json here where the site is published on this node). `invoke status` asks Prometheus itself.

What reaches it cannot stop it (issue 65): each request in its own thread, with a time limit; a webhook is read
whole (at most BODY_MAX), checked (labels and annotations maps of short strings) and refused with 400 otherwise; it
keeps a digest of each alert's labels and their clipped values, at most LIMIT alerts (a critical one takes the place
of another), and says how many it could not keep.
"""
import hashlib
import http.server
import json
import re
import socketserver
import sys
import threading
import time

BODY_MAX = 1 << 20  # bytes of one webhook (Alertmanager's groups of this cluster's alerts are a few KiB)

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
        words += ["{}={}".format(k, labels[k]) for k in ("tier", "node", "instance", "severity", "held_by", "start")
                  if labels.get(k)]
        said = " ".join(words) + ": " + str(notes.get("summary", ""))
        if notes.get("troubleshooting"):
            said += " (troubleshooting: {})".format(notes["troubleshooting"])
        out.append("<{}>{}".format(priority, UNSAFE.sub("?", said)[:400]))
    return out


def invalid(payload):
    """Why a webhook is not one Alertmanager sends (version 4), or None: a map whose `alerts` is a list of maps,
    each with `labels` and `annotations` maps of strings."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts", []), list):
        return "not an Alertmanager webhook: no list of alerts"
    for alert in payload.get("alerts", []):
        if not isinstance(alert, dict):
            return "an alert is not a map"
        for part in ("labels", "annotations"):
            value = alert.get(part) or {}
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                return "an alert's {} are not a map of strings".format(part)
        if not isinstance(alert.get("status", "firing"), str) or not isinstance(alert.get("startsAt", ""), str):
            return "an alert's status or start is not a string"
    return None


class Firing:
    """The alerts firing now, by a digest of their labels, as the webhooks told them (at most LIMIT; a critical one
    takes the place of the oldest other, and those not kept are counted)."""

    LIMIT = 500

    def __init__(self):
        self.alerts, self.as_of, self.dropped, self.lock = {}, None, 0, threading.Lock()

    def update(self, payload):
        with self.lock:
            for alert in payload.get("alerts", []):
                labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
                key = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()
                if alert.get("status") == "resolved":
                    self.alerts.pop(key, None)
                    continue
                if key not in self.alerts and len(self.alerts) >= self.LIMIT:
                    other = next((k for k, a in self.alerts.items() if a["severity"] != "critical"), None)
                    if labels.get("severity") != "critical" or other is None:
                        self.dropped += 1
                        continue
                    del self.alerts[other]
                    self.dropped += 1
                self.alerts[key] = {
                    "alert": clean(labels.get("alertname", "alert")), "tier": clean(labels.get("tier", "")),
                    "node": clean(labels.get("node", "")),  # which node fired GpuXidError, NodeExporterDown
                    "severity": clean(labels.get("severity", "")), "summary": clean(notes.get("summary", "")),
                    "troubleshooting": clean(notes.get("troubleshooting", "")),
                    "since": clean(alert.get("startsAt", ""))}
            self.as_of = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def json(self):
        with self.lock:
            firing = sorted(self.alerts.values(), key=lambda a: (a["severity"] != "critical", a["alert"], a["tier"]))
            return json.dumps({"as_of": self.as_of, "firing": firing, "not_kept": self.dropped}).encode()


def clean(value):
    return UNSAFE.sub("?", str(value))[:300]


FIRING = Firing()


class Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10  # s a client may take to send its request: one that stops sending holds no one else up

    def answer(self, status, why=""):
        body = why.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
        stated = self.headers.get("Content-Length") or ""
        if not stated.isdigit() or int(stated) > BODY_MAX:
            return self.answer(413 if stated.isdigit() else 411, "a webhook of at most {} bytes".format(BODY_MAX))
        try:
            data = self.rfile.read(int(stated))
            payload = json.loads(data.decode()) if len(data) == int(stated) else None
        except (OSError, ValueError, RecursionError):  # cut short, timed out, not JSON, nested too deeply
            payload = None
        why = invalid(payload) if payload is not None else "not a whole JSON webhook"
        if why:
            return self.answer(400, why)
        kept = FIRING.dropped
        for line in lines(payload):
            print(line, flush=True)
        FIRING.update(payload)
        if FIRING.dropped > kept:
            print("<4>alert journal: {} firing alert(s) not kept for the status banner (more than {}); {} in all "
                  "since it started".format(FIRING.dropped - kept, Firing.LIMIT, FIRING.dropped), flush=True)
        return self.answer(200)

    def log_message(self, *args):
        pass  # the alerts are the journal's lines, not the requests


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One thread per request: a client that stops sending holds up only its own (Python 3.6 has no
    ThreadingHTTPServer)."""

    daemon_threads = True


def main(port):
    Server(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: clusterbook-alert-journal PORT")
    main(int(sys.argv[1]))
