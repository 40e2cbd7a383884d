#!/usr/bin/python3
"""clusterbook-wake CONFIG.json: the gateway's wake service for tiers on demand (issue 33), on 127.0.0.1.

nginx asks it before each request to an on-demand tier (auth_request): GET /wake/TIER.
- The tier serves (marked wanted, its endpoint record names a job other than the one it released last, and that
  endpoint answers /health): 204 at once, with X-Backend host:port (nginx proxies the request there).
- The keeper released it (idle): it is marked wanted again, which runs the keeper now; the request waits here
  until the new job serves (204), or until the tier's cap has passed (403 with X-Why: nginx answers 503 with
  Retry-After). Concurrent first requests wake it once: one mark, one keeper run, one job.
- Its operator stopped it (the tier's stop task: neither wanted nor released): 403 at once; a request never starts
  a stopped tier.
The keeper releases a tier through GET /release/TIER?idle_s=N: under the same lock that admits requests, the tier
is released only when no request came for N seconds (nor since its job registered) and llama-server's own
/metrics show none in flight; a request admitted a moment later waits for a new job instead of reaching the one
being cancelled. GET /state tells every tier's state, for invoke status and the scenarios.

It also serves the gateway's hold (hold.py): nginx sends it every request to a routed tier,
which waits here while the tier recovers.
"""
import contextlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, "/usr/local/lib/clusterbook")  # hold.py, where the gateway runbook installs it (layout.py: hold)
import hold  # in clusterbook's source beside this file, where Python looks first when it runs this file from there
from hold import BACKEND, UNSAFE, get

LOCK = threading.Lock()  # admits requests, wakes and releases one at a time
HEALTHY = {}  # tier -> (monotonic time, backend): a serving tier is not asked again within a second


def read_key(path):
    with contextlib.suppress(OSError, TypeError), open(path) as f:
        return f.read().strip() or None
    return None


def touch(path):
    """Create a mark or make it new. One another user left (root's, from a deploy) is replaced: the demand folder is
    the hold user's group's to write, the file not."""
    try:
        with open(path, "a"):
            os.utime(path, None)
    except PermissionError:
        os.unlink(path)
        with open(path, "a"):
            pass


class Tier:
    def __init__(self, name, spec):
        self.name, self.spec = name, spec
        marks = spec["marks"]  # the keeper's marks of its job, named by clusterbook (pure/slurmjob.py: MARKS)
        self.wanted, self.released, self.request = marks["wanted"], marks["released"], marks["request"]
        self.gone = self.released_job()  # the job it released last: its record may linger while it ends

    def record(self):
        with contextlib.suppress(OSError, ValueError), open(self.spec["record"]) as f:
            return json.load(f), os.stat(self.spec["record"]).st_mtime
        return None, None

    def released_job(self):
        with contextlib.suppress(OSError), open(self.released) as f:
            return next((ln.split()[1] for ln in f if ln.startswith("job ")), None)
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
        hosts = self.spec.get("hosts")
        if hosts is not None and str(data.get("host")) not in hosts:
            return None  # a record naming a host the tier does not run on is not followed (hold.py: Route.backend)
        try:
            address = socket.gethostbyname(str(data["host"]))  # nginx needs an address: no resolver there
            backend = f"{address}:{int(data['port'])}"
            status, _ = get(f"http://{backend}/health", timeout=1.0)
        except (OSError, KeyError, ValueError, TypeError):
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
            touch(self.wanted)  # the keeper's path unit runs it now (this service may not start units itself)
            os.unlink(self.released)
            print(f"{self.name}: woken by a request; the keeper runs now", flush=True)
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
        """The tier's own job's state and SLURM's reason, e.g. `PENDING (Resources)`, as nginx may show it to a
        client; never another user's job that took its name."""
        import slurm_jobs  # only tiers on demand (SLURM tiers) ask: the gateway of a cluster without them lacks it
        out = slurm_jobs.own(self.spec, "%T (%r)") or []
        return UNSAFE.sub("", out[0])[:80] if out else "not queued yet"

    def state(self):
        if self.backend():
            return "serving", ""
        if os.path.exists(self.wanted):
            return "starting", "its job is queued or loading"
        if os.path.exists(self.released):
            with contextlib.suppress(OSError), open(self.released) as f:
                return "released", f.readline().strip()
            return "released", ""
        return "stopped", "stopped by its operator"


class Handler(hold.HoldHandler):
    """The hold's requests, and the wake's: /wake/TIER, /release/TIER, /state."""

    tiers = {}  # noqa: RUF012  set once by main(), before the server starts

    def json(self, data):
        self.reply(200, [("Content-Type", "application/json")], json.dumps(data).encode())

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


def main(path):
    with open(path) as f:
        config = json.load(f)
    Handler.tiers = {name: Tier(name, spec) for name, spec in config["tiers"].items()}
    Handler.routes = {name: hold.Route(name, spec) for name, spec in config.get("routes", {}).items()}
    Handler.body_max = config.get("body_max", Handler.body_max)
    Handler.max_lost = config.get("max_lost", Handler.max_lost)
    Handler.slots = threading.BoundedSemaphore(config.get("in_flight_max", 64))
    server = hold.ThreadingServer(("127.0.0.1", config["port"]), Handler)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: clusterbook-wake CONFIG.json")
    main(sys.argv[1])
