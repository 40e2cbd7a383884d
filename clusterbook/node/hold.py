# The gateway's hold: a module clusterbook-wake imports (/usr/local/lib/clusterbook/hold.py), not a program.
"""The gateway's hold (issue 46), in the wake service (clusterbook-wake, which imports it): nginx sends the wake
service every request to a routed tier, X-Clusterbook-Tier naming the tier (a tier on demand only once woken, when the
tier fails it).

A request goes to the tier at once; one the tier refuses, drops before its whole answer, or answers 502/503 (loading)
waits here until the tier answers /health again, at most its hold (the predicted recovery, or a new job's while a SLURM
job is away, and the file's margin), and is sent again, in the order the held requests came: nothing of it reached the
client. A stream is relayed event by event; cut, it is held likewise and continued from the text already sent (a
chat's answer as an assistant prefill, a completion's prompt extended), with comments saying so; a stream whose
request it cannot continue (tools, a format, content parts) ends with an error event instead. Past the hold: 503
with Retry-After, or for a stream an error event.

What a client sends cannot hurt it (issue 65): a body over its limit gets 413, one nested too deep 400, one over
PARSE_MAX is passed on unread; at most `in_flight_max` requests are held (503 past them); a request the tier failed
max_lost times is not sent again; a held request whose client left is dropped; an endpoint record is followed only
to a node of its tier; a thread never ends without an answer."""
import contextlib
import http.client
import http.server
import json
import os
import re
import select
import socket
import socketserver
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # hold_streams.py is installed beside it
from hold_streams import TooDeep, as_json, continuation, last_event, streamed_text

BACKEND = re.compile(r"^[A-Za-z0-9.:-]{1,253}$")
UNSAFE = re.compile(r"[^A-Za-z0-9 ,.:()_-]")  # what a tier or SLURM says goes into JSON answers: plain words only


def get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def whole(response, data):
    """A tier's whole answer as the hold takes it: NOT_THERE while the tier is not there or loads (502, 503), LOST
    where a router's model instance went away with the request (500 "proxy error: …"), else (status, headers, body)."""
    if response.status in (502, 503):
        return NOT_THERE
    if response.status == 500 and data.startswith(ROUTER_LOST):
        return LOST
    return response.status, [(k, v) for k, v in response.getheaders() if k.lower() not in HOP], data


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
PARSE_MAX = 2 << 20  # bytes of a body the hold parses to continue its stream (a 128K-token prompt is under 1 MiB);
# a larger one is passed on unread and its stream not continued: parsing costs up to 30 times a body's size
LINE_MAX = 1 << 20  # bytes of one stream line the hold reads at once (a longer one is passed on in pieces)
NOT_THERE, LOST = "not there", "lost"  # no answer: the tier was not there (or loading), or went away with the request
STREAM = re.compile(rb'"stream"\s*:\s*true')  # a body too large to parse asks for a stream (relayed as it comes)
WAITING_RETRY_MAX_S = 7 * 86400  # the longest Retry-After a tier waiting for other jobs' nodes gives
ROUTER_LOST = b"proxy error: "  # llama-server's router answers 500 so when its model instance went away (its proxy)
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
        """host:port where the tier serves now: its fixed address, or its SLURM job's endpoint record, followed only
        to a node the tier may run on (`hosts`: their names and addresses; a record is anyone's who can write the
        shared folder, and the request it is sent carries the client's prompt and key)."""
        if self.spec.get("backend"):
            return self.spec["backend"]
        try:
            with open(self.spec["record"]) as f:
                data = json.loads(f.read(4096))
            host, port = str(data["host"]), int(data["port"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        hosts = self.spec.get("hosts")
        if hosts is not None and host not in hosts:
            if self.spec.get("_warned") != host:  # once per host named, not at every look
                self.spec["_warned"] = host
                print("{}: endpoint record names {}, not a node of the tier: not followed".format(
                    self.name, UNSAFE.sub("", host)[:80]), flush=True)
            return None
        backend = "{}:{}".format(host, port)
        return backend if BACKEND.match(backend) and 0 < port < 65536 else None

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
        ends by; at most the tier's timeout from when the mark was written: one an apply that was killed left
        behind holds nothing after that); 0 when none is in progress. While one is, a request is held past the crash
        bound and a stopped tier is waited for: the change starts it again."""
        try:
            with open(self.spec["changing"]) as f:
                deadline = float(f.read(64).split()[0])
                written = os.fstat(f.fileno()).st_mtime
        except (KeyError, TypeError, OSError, ValueError, IndexError):
            return 0
        limit = float(self.spec["timeout_s"])
        return max(0.0, min(deadline, written + limit) - time.time()) if deadline == deadline else 0

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
    body_max = 8 << 20  # main() sets the gateway's limit (nginx's client_max_body_size is the same)
    max_lost = 3  # main() sets it: a request the tier failed this often while answering it is not sent again
    slots = threading.BoundedSemaphore(64)  # requests held at once; main() sets the file's figure
    parsing = threading.Lock()  # one large body parsed at a time: parsing costs up to 30 times a body's size
    timeout = 60  # s a client may take to send its request (nginx has buffered it: it takes none)
    answered = False  # the client got a status line: a failure after it ends the stream instead

    def reply(self, status, headers=(), body=b""):
        self.answered = True
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, status, message, retry_after=None):
        """A JSON error of the gateway's own, in the tiers' format."""
        kind = "invalid_request_error" if status in (400, 411, 413) else ("server_error" if status == 500 else
                                                                           "unavailable_error")
        body = json.dumps({"error": {"code": status, "type": kind, "message": message}}).encode()
        headers = [("Content-Type", "application/json")] + ([("Retry-After", str(retry_after))] if retry_after else [])
        return self.reply(status, headers, body)

    def do_POST(self):
        return self.held()

    def do_GET(self):
        return self.held() if "X-Clusterbook-Tier" in self.headers else self.reply(404)

    def held(self):
        """A request to a routed tier, within the cap of requests held at once; whatever fails in its thread is
        answered (502, or an error event ending a stream already open), never a silent close."""
        route = self.routes.get(self.headers.get("X-Clusterbook-Tier", ""))
        if route is None:
            return self.reply(404)
        slots = self.slots  # the one it took from, released below even if main() replaced it meanwhile
        if not slots.acquire(blocking=False):
            print(f"{route.name}: the hold is full: 503", flush=True)
            return self.refuse(503, "the gateway holds as many requests as it may; try again shortly", 1)
        try:
            return self.admitted(route)
        except Exception as exc:  # a thread never ends unanswered
            print(f"{route.name}: the hold failed on {self.command} {route.path(self.path)[:80]}: "
                  f"{type(exc).__name__}: {str(exc)[:200]}", flush=True)
            if not self.answered:
                return self.refuse(502, f"the gateway's hold failed on this request ({type(exc).__name__})")
            return self.end_stream("the gateway's hold failed on this stream")
        finally:
            slots.release()

    def body(self):
        """(the request's body or None, None), or (None, (status, why)) for one the hold refuses: over its limit,
        of no stated length, or not sent whole in time."""
        if self.headers.get("Transfer-Encoding"):
            return None, (411, "a request body needs a Content-Length")
        stated = self.headers.get("Content-Length") or "0"
        if not stated.isdigit():
            return None, (400, "Content-Length is not a number")
        length = int(stated)
        if length > self.body_max:
            return None, (413, f"the request body ({length} bytes) is over the gateway's limit of {self.body_max}")
        data, got = bytearray(length), 0  # read into one buffer of its size: no request costs twice its body
        with contextlib.suppress(OSError):  # socket.timeout is one
            while got < length:
                n = self.rfile.readinto(memoryview(data)[got:])
                if not n:
                    break
                got += n
        if got < length:
            return None, (400, "the request body ended before its Content-Length")
        return (data or None), None

    def admitted(self, route):
        """A request to a routed tier: sent to it; held while the tier cannot answer (at most its hold) and sent
        again, since nothing of an unanswered request reached the client; a stream is relayed as it comes and
        continued where it was cut, when its request allows."""
        body, refused = self.body()
        if refused:
            return self.refuse(*refused)
        try:
            if body and len(body) > PARSE_MAX:
                payload = None
            elif body and len(body) > 65536:
                with self.parsing:
                    payload = as_json(body)
            else:
                payload = as_json(body)
        except TooDeep:
            return self.refuse(400, "the request body is nested too deeply")
        stream = payload.get("stream") is True if payload is not None else bool(body and STREAM.search(body))
        if stream and self.command == "POST":
            return self.streamed(route, payload, body)
        started, tries, lost, key = time.monotonic(), 0, 0, (time.monotonic(), id(self))  # the hold counts from
        limit, retry_after = route.bound()  # when the tier failed it: it may have queued there for longer
        while True:
            backend = route.backend()
            if backend and (tries == 0 or route.ready(backend)):  # the first try goes straight to the tier
                route.wait_turn(key)
                tries += 1
                answer = self.fetch(route, backend, body, (key, PACE_S if tries > 1 else 0))
                if isinstance(answer, tuple):
                    if tries > 1:
                        print(f"{route.name}: held {self.command} {route.path(self.path)[:80]} "
                              f"{time.monotonic() - started:.1f} s, sent {tries} times", flush=True)
                    return self.reply(*answer)
                lost += answer == LOST
                if lost >= self.max_lost:
                    route.sent(key)
                    return self.failed_twice(route)
                route.queue(key)  # held from its first failure, or from a new crash while the tier had it
                started = time.monotonic() if tries == 1 or answer == LOST else started
            if time.monotonic() - started >= limit and not route.changing_s():
                route.sent(key)
                return self.unavailable(route, limit, retry_after)
            if self.client_gone():
                return route.sent(key)
            route.pause(key)
            limit, retry_after = route.later(limit, retry_after)

    def failed_twice(self, route):
        print(f"{route.name}: a request failed the tier {self.max_lost} times: not sent again", flush=True)
        return self.refuse(500, f"tier {route.name} failed {self.max_lost} times while answering this request; it is "
                                "not sent again (it may be what fails the tier)")

    def client_gone(self):
        """The client closed its connection (nginx does when its own client leaves): nothing is held for it."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def unavailable(self, route, limit, retry_after):
        print(f"{route.name}: not back within its hold of {limit} s: 503", flush=True)
        return self.refuse(503, unavailable(route, limit, retry_after), retry_after)

    def fetch(self, route, backend, body, turn):
        """(status, headers, body) of the tier's whole answer; NOT_THERE or LOST (nothing sent to the client) when
        it gave none. turn: (key, pace) of route.sent(), once the request is with the tier (or failed to reach it)."""
        connection, delivered = self.connect(route, backend), False
        try:
            try:
                connection.request(self.command, route.path(self.path), body=body and memoryview(body),
                                   headers=self.passed_headers())  # a view: http.client copies bytes to send them
                delivered = True
            finally:
                route.sent(*turn)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            return LOST if delivered else NOT_THERE
        finally:
            connection.close()
        return whole(response, data)

    def connect(self, route, backend):
        host, port = backend.rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=route.spec["timeout_s"])

    def passed_headers(self):
        return {k: v for k, v in self.headers.items() if k.lower() not in HOP}

    def streamed(self, route, payload, body):
        """A stream, relayed event by event from its first byte; when the tier goes away in the middle, the client
        gets a comment, the stream is held until the tier is back and then continued from what was already sent
        (the chat's answer as an assistant prefill, a completion's prompt extended), after a comment saying so.
        One that cannot be continued (see uncontinuable), or was cut max_lost times, or outlasts the hold, ends
        with an error event, never a silent cut and never anything sent twice."""
        path, data, sent, tokens, opened, cut, lost = route.path(self.path), body, ("", ""), 0, False, None, 0
        started, tries, key = time.monotonic(), 0, (time.monotonic(), id(self))  # sent: (answer, reasoning) so far
        limit, retry_after = route.bound()
        while True:
            backend, response = route.backend(), None
            if backend and (tries == 0 or route.ready(backend)):
                route.wait_turn(key)
                tries += 1
                response = self.open_stream(route, backend, path, data, (key, PACE_S if tries > 1 else 0))
                if response in (NOT_THERE, LOST):  # in line again; the hold counts from the
                    lost += response == LOST  # tier's failure, as admitted() does
                    if lost >= self.max_lost:
                        route.sent(key)
                        return self.end_stream(f"tier {route.name} failed {self.max_lost} times while answering this "
                                               "request; it is not sent again") if opened else self.failed_twice(route)
                    route.queue(key)
                    started, response = (time.monotonic() if tries == 1 or response == LOST else started), None
            if isinstance(response, tuple):  # the tier's whole answer, not a stream (an error)
                why = UNSAFE.sub("", response[2].decode(errors="replace"))[:200]
                return self.end_stream(f"tier {route.name} refused to continue the stream ({response[0]}: {why})") \
                    if opened else self.reply(*response)
            if response is not None:
                if not opened:
                    self.answered = True
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
                cut, started, tries, lost = time.monotonic(), time.monotonic(), 1, lost + 1
                limit, retry_after = route.bound()
                request, why = continuation(payload, sent, tokens, route.spec.get("continue", True))
                if lost >= self.max_lost:
                    why = f"it was cut {lost} times, and is not sent again"
                if why:
                    route.sent(key)
                    return self.end_stream(f"tier {route.name} went away and this stream cannot be continued: {why}")
                data = body if not tokens else json.dumps(request).encode()
                self.comment("clusterbook: the tier went away; this stream resumes when it is back")
                route.queue(key)
                continue
            if time.monotonic() - started >= limit and not route.changing_s():
                route.sent(key)
                if not opened:
                    return self.unavailable(route, limit, retry_after)
                return self.end_stream(unavailable(route, limit, retry_after))
            if self.client_gone():
                return route.sent(key)
            route.pause(key)
            limit, retry_after = route.later(limit, retry_after)

    def open_stream(self, route, backend, path, data, turn):
        """The tier's stream (headers read) or whole other answer; NOT_THERE: not there or loading; LOST: it went."""
        connection, delivered = self.connect(route, backend), False
        headers = dict(self.passed_headers(), **{"Content-Type": "application/json"})
        try:
            try:
                connection.request("POST", path, body=memoryview(data), headers=headers)
                delivered = True
            finally:
                route.sent(*turn)
            response = connection.getresponse()
            answer = response.read(65536) if response.status not in (200, 502, 503) else None
            if answer is not None and response.length:  # cut short: the tier went away as it answered
                raise http.client.IncompleteRead(answer)
        except (OSError, http.client.HTTPException):  # a broken answer was never the client's: 502 would be the
            connection.close()  # hold's own failure to nginx, which sends the request on to the tier without it
            return LOST if delivered else NOT_THERE
        if response.status == 200:
            return response
        connection.close()
        return whole(response, answer)

    def relay(self, response, sent, tokens):
        """Pass a stream's lines to the client as they come; (done, sent, tokens): done when the stream ended ([DONE],
        a last event, or the tier's own error event in a complete HTTP body) or the client went away; not done when
        the tier's connection broke first, or its body ended without a last event (a head whose worker died may close
        it cleanly, empty). tokens: the events that carried anything to the client (text, reasoning, a tool call)."""
        finished, done, refused = False, False, False
        while True:
            try:
                line = response.readline(LINE_MAX)
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
                try:
                    event = as_json(data)
                except TooDeep:
                    event = None
                answer, reasoning, anything = streamed_text(event)
                if anything:
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

    def log_message(self, *args):  # the hold's own lines say what matters
        pass


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One thread per request (a held one waits in its own); Rocky 8's Python 3.6 has no ThreadingHTTPServer."""

    daemon_threads = True
