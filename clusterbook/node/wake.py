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

It is also the gateway's hold (issue 46): nginx sends it every request to a routed tier, X-Clusterbook-Tier naming
the tier (a tier on demand only once woken, when the tier fails it). A request goes to the tier at once; one the tier
refuses, drops before its whole answer, or answers 502/503 (loading) waits here until the tier answers /health
again, at most its hold (the predicted recovery, or a new job's while a SLURM job is away, and the file's margin),
and is sent again, in the order the held requests came: nothing of it reached the client. A stream is relayed
event by event; cut, it is held likewise and continued from the text already sent (a chat's answer as an assistant
prefill, a completion's prompt extended), with comments saying so. Past the hold: 503 with Retry-After, or for a
stream an error event.
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
    with contextlib.suppress(OSError, TypeError), open(path) as f:
        return f.read().strip() or None
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
            with contextlib.suppress(OSError), open(self.released) as f:
                return "released", f.readline().strip()
            return "released", ""
        return "stopped", "stopped by its operator"


def as_json(data):
    """A request's or an event's JSON object, or None."""
    with contextlib.suppress(ValueError):
        value = json.loads(data) if data else None
        return value if isinstance(value, dict) else None
    return None


def continuable(payload):
    """A stream the hold can continue: a chat whose messages are text, or a completion with a text prompt."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        return all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)
    return isinstance(payload.get("prompt"), str)


def continuation(payload, sent, tokens):
    """The request that continues a cut stream from its text: the chat's answer so far as an assistant prefill, or
    the prompt extended; its token limit less what was sent. None: nothing to continue from. A stream cut before
    its first word is the request itself, sent again (its client got nothing of the first: an empty assistant
    prefill is refused by some chat templates, which ended such a stream with an error event)."""
    request = dict(payload)
    if not sent and not tokens and continuable(payload):
        return request
    if isinstance(payload.get("messages"), list):
        request["messages"] = payload["messages"] + [{"role": "assistant", "content": sent}]
    elif isinstance(payload.get("prompt"), str):
        request["prompt"] = payload["prompt"] + sent
    else:
        return None
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        if isinstance(payload.get(key), int) and payload[key] > 0:
            request[key] = max(1, payload[key] - tokens)
    return request


def streamed_text(event):
    """The text one stream event adds: a chat's delta content, or a completion's text (llama-server's too)."""
    if not event:
        return ""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choices[0].get("text")
        return piece if isinstance(piece, str) else ""
    piece = event.get("content")
    return piece if isinstance(piece, str) else ""


def last_event(event):
    """An event that ends its stream: a choice with a finish reason, or llama-server's own `stop`."""
    if not event:
        return False
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason") is not None
    return event.get("stop") is True


def unavailable(route, limit, retry_after):
    return (f"tier {route.name} is starting or recovering; predicted back within {retry_after} s" if limit else
            f"tier {route.name} is stopped by its operator")


PACE_S = 0.02  # between held requests sent again (not first tries): each reaches the tier's queue first
MAX_RESUMES = 3  # a stream cut more often than this ends with an error event: its tier keeps failing it
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
       "content-length", "x-clusterbook-tier"}  # not passed on: each hop sets its own


class Route:
    """A tier behind the gateway as the hold sees it: where it serves now, and how long a request may wait."""

    def __init__(self, name, spec):  # line: held requests (arrival, id) in order; back: told the tier is back
        self.name, self.spec, self.line, self.turn, self.back = name, spec, set(), threading.Condition(), \
            threading.Condition()

    def queue(self, key):
        """A request its tier failed: in line by its arrival, as llama-server's own queue had it."""
        with self.turn:
            self.line.add(key)

    def wait_turn(self, key):
        """In line until every request from before `key` in it was sent (at most 2 s: one stuck is not waited for)."""
        with self.turn:
            self.line.add(key)
            self.turn.wait_for(lambda: min(self.line) >= key, timeout=2)

    def sent(self, key, pace=0.0):  # sent again (the next one `pace` s later: the tier takes them in order), or not
        with self.turn:
            time.sleep(pace if key in self.line and len(self.line) > 1 else 0)
            self.line.discard(key)
            self.turn.notify_all()

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
        """The tier answers /health; then every request held for it looks again at once (pause())."""
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            if get(f"http://{backend}/health")[0] == 200:
                with self.back:
                    self.back.notify_all()
                return True
        return False

    def pause(self, seconds):
        with self.back:
            self.back.wait(seconds)

    def away(self):
        """(hold, Retry-After) while a SLURM tier's job is away and a new one is coming: its record gone and the
        tier still wanted (or released on demand); None otherwise. A tier its operator stopped is not waited for."""
        if not self.spec.get("new_job_hold_s") or self.backend():
            return None
        marks = [self.spec[m] for m in ("wanted", "released") if self.spec.get(m)]  # on the keeper's node only
        if marks and not any(os.path.exists(m) for m in marks):
            return 0, self.spec["retry_after"]
        return self.spec["new_job_hold_s"], self.spec["new_job_retry_after"]

    def changing_s(self):
        """Seconds left of an apply's or a rollback's change of the tier (its mark holds the node-clock second it
        ends by, at most the tier's timeout from now); 0 when none is in progress. While one is, a request is held
        past the crash bound and a stopped tier is waited for: the change starts it again."""
        try:
            with open(self.spec["changing"]) as f:
                deadline = float(f.read().split()[0])
        except (KeyError, TypeError, OSError, ValueError, IndexError):
            return 0
        return max(0.0, min(deadline - time.time(), float(self.spec["timeout_s"])))

    def bound(self):
        """(how long a request may be held, the Retry-After past it), for the tier's state now."""
        return self.away() or (self.spec["hold_s"], self.spec["retry_after"])

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
        """A request to a routed tier: sent to it; held while the tier cannot answer (at most its hold) and sent
        again, since nothing of an unanswered request reached the client; a stream is continued where it was cut."""
        route = self.routes.get(self.headers.get("X-Clusterbook-Tier", ""))
        if route is None:
            return self.reply(404)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        payload = as_json(body)
        if payload is not None and payload.get("stream") is True and continuable(payload):
            return self.streamed(route, payload)
        started, tries, key = time.monotonic(), 0, (time.monotonic(), id(self))  # the hold counts from when the
        limit, retry_after = route.bound()  # tier failed it: it may have queued there for longer than the hold
        while True:
            backend = route.backend()
            if backend and (tries == 0 or route.ready(backend)):  # the first try goes straight to the tier
                route.wait_turn(key)
                tries += 1
                answer = self.fetch(route, backend, body, (key, PACE_S if tries > 1 else 0))
                if answer is not None:
                    if tries > 1:
                        print(f"{route.name}: held {self.command} {route.path(self.path)} "
                              f"{time.monotonic() - started:.1f} s, sent {tries} times", flush=True)
                    return self.reply(*answer)
                route.queue(key)
                started = time.monotonic() if tries == 1 else started
            if time.monotonic() - started >= limit and not route.changing_s():
                route.sent(key)
                return self.unavailable(route, limit, retry_after)
            route.pause(0.5)
            limit, retry_after = max((limit, retry_after), route.bound())  # a job that left meanwhile: its new one

    def unavailable(self, route, limit, retry_after):
        print(f"{route.name}: not back within its hold of {limit} s: 503", flush=True)
        body = json.dumps({"error": {"code": 503, "type": "unavailable_error", "message": unavailable(
            route, limit, retry_after)}})
        return self.reply(503, [("Content-Type", "application/json"), ("Retry-After", str(retry_after))],
                          body.encode())

    def fetch(self, route, backend, body, turn):
        """(status, headers, body) of the tier's whole answer; None, with nothing sent to the client, when the tier
        gave none (it went away before or during its answer, or answered 502/503 while loading). turn: (key, pace)
        of route.sent(), once the request is with the tier (or failed to reach it)."""
        connection = self.connect(route, backend)
        try:
            try:
                connection.request(self.command, route.path(self.path), body=body, headers=self.passed_headers())
            finally:
                route.sent(*turn)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()
        if response.status in (502, 503):
            return None
        return response.status, [(k, v) for k, v in response.getheaders() if k.lower() not in HOP], data

    def connect(self, route, backend):
        host, port = backend.rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=route.spec["timeout_s"])

    def passed_headers(self):
        return {k: v for k, v in self.headers.items() if k.lower() not in HOP}

    def streamed(self, route, payload):
        """A stream, relayed event by event; when the tier goes away in the middle, the client gets a comment, the
        stream is held until the tier is back and then continued from the text already sent (the chat's answer
        as an assistant prefill, a completion's prompt extended), after a comment saying so; past the hold, an
        error event ends it, never a silent cut."""
        path, request = route.path(self.path), payload
        sent, tokens, opened, cut, resumes = "", 0, False, None, 0
        started, tries, key = time.monotonic(), 0, (time.monotonic(), id(self))
        limit, retry_after = route.bound()
        while True:
            backend, response = route.backend(), None
            if backend and (tries == 0 or route.ready(backend)):
                route.wait_turn(key)
                tries += 1
                response = self.open_stream(route, backend, path, request, (key, PACE_S if tries > 1 else 0))
                if response is None:  # in line again; the hold counts from the tier's failure, as held() does
                    route.queue(key)
                    started = time.monotonic() if tries == 1 else started
            if response is not None and response.status != 200:
                data = response.read()
                if not opened:
                    return self.reply(response.status, [(k, v) for k, v in response.getheaders()
                                                        if k.lower() not in HOP], data)
                return self.end_stream(f"tier {route.name} refused to continue the stream ({response.status}: "
                                       f"{UNSAFE.sub('', data.decode(errors='replace'))[:200]})")
            if response is not None:
                if not opened:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    opened = True
                if cut is not None:
                    self.comment(f"clusterbook: the stream resumed after {time.monotonic() - cut:.1f} s")
                    print(f"{route.name}: a stream resumed after {time.monotonic() - cut:.1f} s, {tokens} tokens "
                          "in", flush=True)
                done, sent, tokens = self.relay(response, sent, tokens)
                if done:
                    return None
                cut, started, tries, resumes = time.monotonic(), time.monotonic(), 1, resumes + 1
                limit, retry_after = route.bound()
                request = continuation(payload, sent, tokens)
                if request is None or resumes > MAX_RESUMES:
                    return self.end_stream(f"tier {route.name} went away and this stream cannot be continued"
                                           + (f" (cut {resumes} times)" if request else ""))
                self.comment("clusterbook: the tier went away; this stream resumes when it is back")
                route.queue(key)
                continue
            if time.monotonic() - started >= limit and not route.changing_s():
                route.sent(key)
                if not opened:
                    return self.unavailable(route, limit, retry_after)
                return self.end_stream(unavailable(route, limit, retry_after))
            route.pause(0.5)
            limit, retry_after = max((limit, retry_after), route.bound())

    def open_stream(self, route, backend, path, request, turn):
        """The tier's answer to a stream request (its headers read); None when it gave none or is loading."""
        connection = self.connect(route, backend)
        headers = dict(self.passed_headers(), **{"Content-Type": "application/json"})
        try:
            try:
                connection.request("POST", path, body=json.dumps(request).encode(), headers=headers)
            finally:
                route.sent(*turn)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException):
            connection.close()
            return None
        if response.status in (502, 503):
            connection.close()
            return None
        return response

    def relay(self, response, sent, tokens):
        """Pass a stream's lines to the client as they come, keeping the text they carry; (done, text, tokens):
        done when the stream ended ([DONE], a last event, or the tier's own error event in a complete HTTP body)
        or the client went away; not done when the tier's connection broke first, or its body ended without a last
        event (a head that fails a request when its worker dies may close the stream cleanly, with nothing in
        it)."""
        finished, done, refused = False, False, False
        while True:
            try:
                line = response.readline()
            except (OSError, ValueError, http.client.HTTPException):  # cut mid-chunk or mid-body
                line = None
            if not line:
                # an end without the stream's own last event is a cut, unless the HTTP body said it was complete:
                # http.client reads a broken chunked body as its end too, leaving chunk_left 0 (None only after
                # the last chunk; the same since Python 3.5)
                whole = line is not None and response.chunked and response.chunk_left is None
                if finished and not done:  # the last event came, then the tier went before its [DONE]: end it
                    self.write(b"data: [DONE]\n\n")
                return finished or (whole and refused), sent, tokens
            if line.startswith(b"data: "):
                data = line[6:].strip()
                event = as_json(data)
                piece = streamed_text(event)
                if piece:
                    sent, tokens = sent + piece, tokens + 1
                done = done or data == b"[DONE]"
                finished = finished or done or last_event(event)
                refused = refused or (isinstance(event, dict) and "error" in event)
            if not self.write(line):
                return True, sent, tokens

    def write(self, data):
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except OSError:
            return False

    def comment(self, words):
        self.write(f": {words}\n\n".encode())

    def end_stream(self, message):
        """An error event, then the stream's end: a client sees why it stopped."""
        event = {"error": {"code": 503, "type": "unavailable_error", "message": message}}
        self.write(b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n")

    def log_message(self, *args):
        pass


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One thread per request (a held one waits in its own); Rocky 8's Python 3.6 has no ThreadingHTTPServer."""

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
