#!/usr/bin/python3
"""clusterbook-alert-journal PORT: Alertmanager's local receiver on the monitoring node, on 127.0.0.1:PORT.

Alertmanager sends it every alert group (its webhook format, version 4) whatever other receivers the cluster file
names, so an alert is seen even where it names none, and nothing invents an address: each alert becomes one line
of this service's journal (`journalctl -u clusterbook-alert-journal`), at the syslog priority of its severity
(critical: 2, warning: 4; resolved: 5), with its tier, summary and troubleshooting entries. Nothing else is kept:
`invoke status` asks Prometheus which alerts fire now.
"""
import http.server
import json
import re
import sys

PRIORITY = {"critical": 2, "warning": 4}  # journald reads a "<N>" line prefix as the line's priority
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
        words += ["{}={}".format(k, labels[k]) for k in ("tier", "instance", "severity") if labels.get(k)]
        said = " ".join(words) + ": " + str(notes.get("summary", ""))
        if notes.get("troubleshooting"):
            said += " (troubleshooting: {})".format(notes["troubleshooting"])
        out.append("<{}>{}".format(priority, UNSAFE.sub("?", said)[:400]))
    return out


class Handler(http.server.BaseHTTPRequestHandler):
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
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass  # the alerts are the journal's lines, not the requests


def main(port):
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: clusterbook-alert-journal PORT")
    main(int(sys.argv[1]))
