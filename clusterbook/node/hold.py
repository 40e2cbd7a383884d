# The gateway's hold: a module clusterbook-wake imports (/usr/local/lib/clusterbook/hold.py), not a program.
"""The gateway's hold (issue 46), in the wake service (clusterbook-wake, which imports it): nginx sends the wake
service every request to a routed tier, X-Clusterbook-Tier naming the tier (a tier on demand only once woken, when the
tier fails it).

A request goes to the tier at once; one the tier refuses, drops before its whole answer, or answers 502/503 (loading)
waits here until the tier answers /health again, at most its hold (the predicted recovery, or a new job's while a SLURM
job is away, and the file's margin), and is sent again, in the order the held requests came: nothing of it reached the
client. A stream is relayed event by event; cut, it is held likewise and continued from the text already sent (a
chat's answer as an assistant prefill, a completion's prompt extended), with comments saying so. Past the hold: 503
with Retry-After, or for a stream an error event.
"""
import contextlib
import http.client
import http.server
import json
import os
import re
import socketserver
import threading
import time
import urllib.request

BACKEND = re.compile(r"^[A-Za-z0-9.:-]{1,253}$")
UNSAFE = re.compile(r"[^A-Za-z0-9 ,.:()_-]")  # what a tier or SLURM says goes into JSON answers: plain words only


def get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


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


def continuation(payload, sent, tokens, allowed=True):
    """The request that continues a cut stream from what its client got, sent = (answer, reasoning): a chat's answer
    so far as an assistant prefill, with a thinking model's reasoning so far (llama-server continues the reasoning
    where the answer has not begun), or a completion's prompt extended; its token limit less what was sent. None:
    nothing to continue from, or the route continues no stream (continue_streams: false, where a chat template cannot
    continue an assistant message). A stream cut before its first word is the request itself, sent again (its client
    got nothing of the first: an empty assistant prefill is refused by some chat templates)."""
    request, (answer, reasoning) = dict(payload), sent
    if not answer and not reasoning and not tokens and continuable(payload):
        return request
    if not allowed:
        return None
    if isinstance(payload.get("messages"), list):
        prefill = {"role": "assistant", "content": answer}
        if reasoning:
            prefill["reasoning_content"] = reasoning
        request["messages"] = payload["messages"] + [prefill]
    elif isinstance(payload.get("prompt"), str):
        request["prompt"] = payload["prompt"] + answer
    else:
        return None
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        if isinstance(payload.get(key), int) and payload[key] > 0:
            request[key] = max(1, payload[key] - tokens)
    return request


def streamed_text(event):
    """(answer, reasoning) one stream event adds: a chat's delta content and reasoning_content (llama-server's
    reasoning parser puts a thinking model's thoughts there), or a completion's text (llama-server's own too)."""
    if not event:
        return "", ""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        if not isinstance(delta, dict):
            piece = choices[0].get("text")
            return (piece if isinstance(piece, str) else ""), ""
        return tuple(delta.get(k) if isinstance(delta.get(k), str) else "" for k in ("content", "reasoning_content"))
    piece = event.get("content")
    return (piece if isinstance(piece, str) else ""), ""


def last_event(event):
    """An event that ends its stream: a choice with a finish reason, or llama-server's own `stop`."""
    if not event:
        return False
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason") is not None
    return event.get("stop") is True


def unavailable(route, limit, retry_after):
    waiting = route.waiting()
    if waiting:
        return (f"tier {route.name} waits for its nodes, which other jobs hold ({waiting[1]}); SLURM expects it "
                f"back in about {retry_after} s")
    return (f"tier {route.name} is starting or recovering; predicted back within {retry_after} s" if limit else
            f"tier {route.name} is stopped by its operator")


PACE_S = 0.02  # between held requests sent again (not first tries): each reaches the tier's queue first
LOOK_S = (0.1, 0.5)  # between looks at a tier that is down: the request first in line, and the others (which the
# first wakes when it finds the tier back)
MAX_RESUMES = 3  # a stream cut more often than this ends with an error event: its tier keeps failing it
WAITING_RETRY_MAX_S = 7 * 86400  # the longest Retry-After a tier waiting for other jobs' nodes gives
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

    def pause(self, key):
        """Until the next look at the tier: soon for the request first in line, later for the others."""
        with self.turn:
            first = not self.line or min(self.line) >= key
        with self.back:
            self.back.wait(LOOK_S[0] if first else LOOK_S[1])

    def away(self):
        """(hold, Retry-After) while a SLURM tier's job is away and a new one is coming: its record gone and the
        tier still wanted (or released on demand); None otherwise. A tier its operator stopped is not waited for."""
        if not self.spec.get("new_job_hold_s") or self.backend():
            return None
        marks = [self.spec[m] for m in ("wanted", "released") if self.spec.get(m)]  # on the keeper's node only
        if marks and not any(os.path.exists(m) for m in marks):
            return 0, self.spec["retry_after"]
        return self.spec["new_job_hold_s"], self.spec["new_job_retry_after"]

    def waiting(self):
        """(Retry-After, who holds its nodes) while the tier's SLURM job waits for nodes other jobs hold (VASP's):
        the keeper's waiting mark, on the keeper's node only; None otherwise. SLURM's estimate of the start, else
        the holders' end, gives the Retry-After; neither known: the new job's."""
        path = self.spec.get("waiting")
        if not path or self.backend():
            return None
        try:
            with open(path) as f:
                data = json.loads(f.read(4096))
            until, held_by = data.get("until"), str(data.get("held_by", ""))
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(until, (int, float)) and not isinstance(until, bool):
            retry = int(max(1, min(until - time.time(), WAITING_RETRY_MAX_S)))
        else:
            retry = self.spec.get("new_job_retry_after") or self.spec["retry_after"]
        return retry, UNSAFE.sub("", held_by)[:200]

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
        """(how long a request may be held, the Retry-After past it), for the tier's state now: none while its job
        waits for other jobs' nodes (for hours, maybe), only the estimate."""
        waiting = self.waiting()
        if waiting:
            return 0, waiting[0]
        return self.away() or (self.spec["hold_s"], self.spec["retry_after"])

    def later(self, limit, retry_after):
        """The bound after a pause: a job that left meanwhile gives its new one's, never less; a job that now waits
        for other jobs' nodes gives none (the request is answered with the estimate at once)."""
        bound = self.bound()
        return bound if bound[0] == 0 and self.waiting() else max((limit, retry_after), bound)

    def path(self, path):
        """The path as the tier takes it: without the route's prefix, where the path port's server added one."""
        prefix = self.spec.get("prefix") or "/"
        return "/" + path[len(prefix):] if prefix != "/" and path.startswith(prefix) else path


class HoldHandler(http.server.BaseHTTPRequestHandler):
    """The hold's requests: every one to a routed tier (X-Clusterbook-Tier names it). The wake service's handler
    adds its own GETs."""

    routes = {}  # noqa: RUF012  set once by main(), before the server starts: every tier behind the gateway

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        return self.held()

    def do_GET(self):
        return self.held() if "X-Clusterbook-Tier" in self.headers else self.reply(404)

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
            route.pause(key)
            limit, retry_after = route.later(limit, retry_after)

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
        sent, tokens, opened, cut, resumes = ("", ""), 0, False, None, 0  # sent: (answer, reasoning) so far
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
                request = continuation(payload, sent, tokens, route.spec.get("continue", True))
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
            route.pause(key)
            limit, retry_after = route.later(limit, retry_after)

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
        """Pass a stream's lines to the client as they come, keeping what they carry; (done, sent, tokens):
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
                answer, reasoning = streamed_text(event)
                if answer or reasoning:
                    sent, tokens = (sent[0] + answer, sent[1] + reasoning), tokens + 1
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
