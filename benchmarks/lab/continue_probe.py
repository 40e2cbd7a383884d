#!/usr/bin/python3
"""On a lab node: a real llama-server behind the gateway's hold (hold.py beside this file), given a chat template;
it is killed while a stream is in flight and started again; prints one JSON line: what the client's stream carried.

    python3 continue_probe.py BINARY MODEL TEMPLATE KILL_AFTER_S
"""
import atexit
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hold

BINARY, MODEL, TEMPLATE, KILL_AFTER_S = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
PORT, HOLD_PORT = 18089, 18090  # loopback of the node
ARGV = [BINARY, "--model", MODEL, "--host", "127.0.0.1", "--port", str(PORT), "--jinja", "--chat-template-file",
        TEMPLATE, "--ctx-size", "4096", "-ngl", "0", "--threads", "1", "--parallel", "1", "--cache-ram", "0"]
LOG = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.log"), "w")  # noqa: SIM115  the servers write to it while this runs
BODY = {"messages": [{"role": "user", "content": "Think about the sea."}], "stream": True, "max_tokens": 1500,
        "temperature": 0}
servers = []
atexit.register(lambda: [s.kill() for s in servers])


def serve():
    server = subprocess.Popen(ARGV, stdout=LOG, stderr=LOG, env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(
        BINARY)))
    servers.append(server)
    for _ in range(300):
        if server.poll() is not None:
            sys.exit("llama-server exited: see server.log")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("llama-server did not answer /health in 30 s")


def carried(raw):
    """(reasoning, answer, events) of an SSE body."""
    deltas = [json.loads(line[6:])["choices"][0].get("delta", {}) for line in raw.splitlines()
              if line.startswith("data: {") and '"choices"' in line]
    return ("".join(d.get("reasoning_content") or "" for d in deltas), "".join(d.get("content") or "" for d in deltas),
            len(deltas))


def prompt_tokens():
    """The prompt of each request the server took, in tokens (its own log)."""
    with open(LOG.name) as f:
        return [int(line.split("/")[1].split()[0]) for line in f if "prompt eval time" in line]


def first_prompt_tokens():
    """The first request's prompt in tokens, as the server renders and tokenizes it."""
    def post(path, body):
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())
    prompt = post("/apply-template", {"messages": BODY["messages"]})["prompt"]
    return len(post("/tokenize", {"content": prompt})["tokens"])


server = serve()
hold.HoldHandler.routes = {"probe": hold.Route("probe", {"backend": f"127.0.0.1:{PORT}", "hold_s": 60,
                                                         "retry_after": 5, "timeout_s": 300})}
service = hold.ThreadingServer(("127.0.0.1", HOLD_PORT), hold.HoldHandler)
threading.Thread(target=service.serve_forever, daemon=True).start()


def kill_and_restart():
    time.sleep(KILL_AFTER_S)
    server.send_signal(signal.SIGKILL)
    server.wait()
    time.sleep(1.0)
    serve()


threading.Thread(target=kill_and_restart, daemon=True).start()
connection = http.client.HTTPConnection("127.0.0.1", HOLD_PORT, timeout=300)
connection.request("POST", "/v1/chat/completions", json.dumps(BODY), {"X-Clusterbook-Tier": "probe",
                                                                       "Content-Type": "application/json"})
response = connection.getresponse()
raw = response.read().decode(errors="replace")
reasoning, answer, events = carried(raw)
print(json.dumps({"status": response.status, "events": events, "reasoning_chars": len(reasoning),
                  "answer_chars": len(answer), "comments": [ln for ln in raw.splitlines() if ln.startswith(":")],
                  "error_events": [ln for ln in raw.splitlines() if '"error"' in ln],
                  "done": raw.rstrip().endswith("data: [DONE]"), "first_prompt_tokens": first_prompt_tokens(),
                  "continuation_prompt_tokens": prompt_tokens()}))
