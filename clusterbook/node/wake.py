#!/usr/bin/python3
"""clusterbook-wake CONFIG.json: the gateway's wake service for tiers on demand (issue 33), on 127.0.0.1.

nginx asks it before each request to an on-demand tier (auth_request): GET /wake/TIER.
- The tier serves (marked wanted, its endpoint record names a job other than the one it released last, and that
  endpoint answers /health): 204 at once, with X-Backend host:port (nginx proxies the request there).
- The keeper released it (idle): it is marked wanted again and the keeper started now; the request waits here
  until the new job serves (204), or until the tier's cap has passed (403 with X-Why: nginx answers 503 with
  Retry-After). Concurrent first requests wake it once: one mark, one keeper run, one job.
- Its operator stopped it (the tier's stop task: neither wanted nor released): 403 at once; a request never starts
  a stopped tier.
The keeper releases a tier through GET /release/TIER?idle_s=N: under the same lock that admits requests, the tier
is released only when no request came for N seconds (nor since its job registered) and llama-server's own
/metrics show none in flight; a request admitted a moment later waits for a new job instead of reaching the one
being cancelled. GET /state tells every tier's state, for invoke status and the scenarios.

It also holds what a tier cannot answer now (issue 46): nginx hands it any request to a routed tier that the tier
refused, dropped before answering, or answered 502/503 (loading), with X-Clusterbook-Tier naming the tier. The request
waits here until the tier answers /health again, at most the tier's hold (its predicted recovery and the file's
margin), and is then sent to it and its answer streamed back; past the hold, 503 with Retry-After. A request is sent
again only when its tier gave no answer: nothing of a first attempt ever reached the client.
"""
import contextlib
import http.client
import http.server
import json
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

BACKEND = re.compile(r"^[A-Za-z0-9.:-]{1,253}$")
UNSAFE = re.compile(r"[^A-Za-z0-9 ,.:()_-]")  # X-Why goes into nginx's JSON answer: plain words only
LOCK = threading.Lock()  # admits requests, wakes and releases one at a time
HEALTHY = {}  # tier -> (monotonic time, backend): a serving tier is not asked again within a second


def read_key(path):
    try:
        with open(path) as f:
            return f.read().strip() or None
    except (OSError, TypeError):
        return None


def touch(path):
    with open(path, "a"):
        os.utime(path, None)


def get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


class Tier:
    def __init__(self, name, spec):
        self.name = name
        self.spec = spec
        marks = spec["marks"]  # the keeper's marks of its job, named by clusterbook (pure/slurmjob.py: MARKS)
        self.wanted, self.released, self.request = marks["wanted"], marks["released"], marks["request"]
        self.gone = self.released_job()  # the job it released last: its record may linger while it ends

    def record(self):
        try:
            with open(self.spec["record"]) as f:
                data = json.load(f)
            return data, os.stat(self.spec["record"]).st_mtime
        except (OSError, ValueError):
            return None, None

    def released_job(self):
        try:
            with open(self.released) as f:
                return next((ln.split()[1] for ln in f if ln.startswith("job ")), None)
        except OSError:
            return None

    def backend(self):
        """host:port where the tier serves now (a job it did not release, answering /health), else None."""
        if not os.path.exists(self.wanted):
            return None
        seen = HEALTHY.get(self.name)
        if seen and time.monotonic() - seen[0] < 1.0:
            return seen[1]
        data, _ = self.record()
        if not data or str(data.get("job_id")) == str(self.gone):
            return None
        try:
            address = socket.gethostbyname(str(data["host"]))  # nginx needs an address: no resolver there
            backend = f"{address}:{int(data['port'])}"
            status, _ = get(f"http://{backend}/health", timeout=1.0)
        except (OSError, KeyError, ValueError):
            return None
        if status != 200 or not BACKEND.match(backend):
            return None
        HEALTHY[self.name] = (time.monotonic(), backend)
        return backend

    def admit(self):
        """A request came: note its time; wake a released tier. False when its operator stopped the tier."""
        with LOCK:
            touch(self.request)
            if os.path.exists(self.wanted):
                return True
            if not os.path.exists(self.released):
                return False
            self.gone = self.released_job()
            touch(self.wanted)
            os.unlink(self.released)
            with contextlib.suppress(OSError, subprocess.SubprocessError):  # the keeper's timer runs it soon
                # anyway: starting it now saves up to its interval
                subprocess.run(["systemctl", "start", "--no-block", self.spec["keeper_unit"]], check=False,
                               timeout=10)
            print(f"{self.name}: woken by a request; keeper started", flush=True)
            return True

    def in_flight(self, backend):
        """Requests llama-server is processing or has deferred, by its own metrics (a router: every loaded
        model's); None when it cannot tell."""
        key = read_key(self.spec.get("key_file"))
        urls = [f"http://{backend}/metrics"]
        try:
            if self.spec["kind"] == "router":
                _, body = get(f"http://{backend}/v1/models", key)
                loaded = [m["id"] for m in json.loads(body).get("data", [])
                          if (m.get("status") or {}).get("value") == "loaded"]
                urls = [f"http://{backend}/metrics?model={urllib.parse.quote(m)}" for m in loaded]
            total = 0
            for url in urls:
                _, body = get(url, key)
                for line in body.decode(errors="replace").splitlines():
                    if line.startswith(("llamacpp:requests_processing ", "llamacpp:requests_deferred ")):
                        total += int(float(line.split()[1]))
            return total
        except (OSError, ValueError, KeyError):
            return None

    def release(self, idle_s):
        """Release the tier if it has been idle for idle_s with nothing in flight; the keeper cancels the job."""
        with LOCK:
            data, registered = self.record()
            backend = self.backend()
            if not os.path.exists(self.wanted) or not data or not backend:
                return {"released": False, "why": "not serving"}
            try:
                last = os.stat(self.request).st_mtime
            except OSError:
                last = 0
            idle = time.time() - max(last, registered or 0)
            if idle < idle_s:
                return {"released": False, "why": f"idle {idle:.0f} s"}
            busy = self.in_flight(backend)
            if busy != 0:
                return {"released": False, "why": f"in flight: {busy}"}
            job = str(data.get("job_id"))
            with open(self.released, "w") as f:
                f.write(f"idle for {idle:.0f} s with none in flight (released at "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())})\njob {job}\n")
            os.unlink(self.wanted)
            self.gone = job
            HEALTHY.pop(self.name, None)
            print(f"{self.name}: released job {job} after {idle:.0f} s idle", flush=True)
            return {"released": True, "job_id": job, "idle_s": round(idle)}

    def queued(self):
        """The job's state and SLURM's reason, e.g. `PENDING (Resources)`, as nginx may show it to a client."""
        try:
            out = subprocess.run(["squeue", "-h", "-n", self.spec["job"], "-o", "%T (%r)"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True,
                                 timeout=10).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            out = []
        return UNSAFE.sub("", out[0])[:80] if out else "not queued yet"

    def state(self):
        if self.backend():
            return "serving", ""
        if os.path.exists(self.wanted):
            return "starting", "its job is queued or loading"
        if os.path.exists(self.released):
            try:
                with open(self.released) as f:
                    return "released", f.readline().strip()
            except OSError:
                return "released", ""
        return "stopped", "stopped by its operator"


HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
       "content-length", "x-clusterbook-tier"}  # not passed on: each hop sets its own


class Route:
    """A tier behind the gateway as the hold sees it: where it serves now, and how long a request may wait."""

    def __init__(self, name, spec):
        self.name = name
        self.spec = spec

    def backend(self):
        """host:port where the tier serves now: its fixed address, or its SLURM job's endpoint record."""
        if self.spec.get("backend"):
            return self.spec["backend"]
        try:
            with open(self.spec["record"]) as f:
                data = json.load(f)
            backend = "{}:{}".format(data["host"], int(data["port"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return backend if BACKEND.match(backend) else None

    def ready(self, backend):
        try:
            return get(f"http://{backend}/health")[0] == 200
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def path(self, path):
        """The path as the tier takes it: without the route's prefix, where the path port's server added one."""
        prefix = self.spec.get("prefix") or "/"
        return "/" + path[len(prefix):] if prefix != "/" and path.startswith(prefix) else path


class Handler(http.server.BaseHTTPRequestHandler):
    tiers = {}  # noqa: RUF012  set once by main(), before the server starts
    routes = {}  # noqa: RUF012  likewise: every tier behind the gateway, for the hold

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def json(self, data):
        self.reply(200, [("Content-Type", "application/json")], json.dumps(data).encode())

    def do_POST(self):
        return self.held()

    def do_GET(self):
        if "X-Clusterbook-Tier" in self.headers:
            return self.held()
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if parts == ["state"]:
            return self.json({name: dict(zip(("state", "reason"), t.state())) for name, t in self.tiers.items()})
        if len(parts) != 2 or parts[1] not in self.tiers:
            return self.reply(404)
        tier = self.tiers[parts[1]]
        if parts[0] == "release":
            idle_s = urllib.parse.parse_qs(url.query).get("idle_s", [""])[0]
            return self.json(tier.release(int(idle_s))) if idle_s.isdigit() else self.reply(400)
        if parts[0] != "wake":
            return self.reply(404)
        if not tier.admit():
            return self.reply(403, [("X-Why", "stopped by its operator")])
        started = time.monotonic()
        backend = tier.backend()
        while not backend and time.monotonic() - started < tier.spec["cap_s"]:
            time.sleep(0.5)
            backend = tier.backend()
        if backend:
            if time.monotonic() - started > 1:
                print(f"{tier.name}: served after {time.monotonic() - started:.1f} s of waiting", flush=True)
            return self.reply(204, [("X-Backend", backend)])
        why = f"still starting after {tier.spec['cap_s']} s, its job {tier.queued()}"
        print(f"{tier.name}: {why}", flush=True)
        return self.reply(403, [("X-Why", why)])

    def held(self):
        """A request its tier could not answer: wait until the tier is back, at most its hold, then send it."""
        route = self.routes.get(self.headers.get("X-Clusterbook-Tier", ""))
        if route is None:
            return self.reply(404)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        started, tries = time.monotonic(), 0
        while True:
            backend = route.backend()
            if backend and route.ready(backend):
                tries += 1
                if self.forward(route, backend, body):
                    waited = time.monotonic() - started
                    print(f"{route.name}: held {self.command} {route.path(self.path)} {waited:.1f} s, sent "
                          f"{tries} time(s)", flush=True)
                    return None
            if time.monotonic() - started >= route.spec["hold_s"]:
                print(f"{route.name}: not back within its hold of {route.spec['hold_s']} s: 503", flush=True)
                message = (f"tier {route.name} is starting or recovering; predicted back within "
                           f"{route.spec['retry_after']} s")
                body = json.dumps({"error": {"code": 503, "type": "unavailable_error", "message": message}})
                return self.reply(503, [("Content-Type", "application/json"),
                                        ("Retry-After", str(route.spec["retry_after"]))], body.encode())
            time.sleep(0.5)

    def forward(self, route, backend, body):
        """Send the request to the tier and stream its answer back; False, with nothing sent to the client, when
        the tier gave no answer (it went away again, or answered 502/503 while loading)."""
        host, port = backend.rsplit(":", 1)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        connection = http.client.HTTPConnection(host, int(port), timeout=route.spec["timeout_s"])
        try:
            connection.request(self.command, route.path(self.path), body=body, headers=headers)
            response = connection.getresponse()
            if response.status in (502, 503):
                response.read()
                return False
        except (OSError, http.client.HTTPException):
            connection.close()
            return False
        try:
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in HOP:
                    self.send_header(name, value)
            self.send_header("Connection", "close")  # the answer ends when this connection does
            self.end_headers()
            while True:  # line by line: a stream's events reach the client as the tier sends them
                line = response.readline()
                if not line:
                    break
                self.wfile.write(line)
                self.wfile.flush()
        except (OSError, http.client.HTTPException):
            pass  # cut after its answer began: never sent again
        finally:
            connection.close()
        return True

    def log_message(self, *args):
        pass


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One thread per request (a held request waits in its own); Python 3.6 (Rocky 8's python3) has no
    http.server.ThreadingHTTPServer."""

    daemon_threads = True


def main(path):
    with open(path) as f:
        config = json.load(f)
    Handler.tiers = {name: Tier(name, spec) for name, spec in config["tiers"].items()}
    Handler.routes = {name: Route(name, spec) for name, spec in config.get("routes", {}).items()}
    server = ThreadingServer(("127.0.0.1", config["port"]), Handler)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: clusterbook-wake CONFIG.json")
    main(sys.argv[1])
