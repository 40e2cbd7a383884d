"""The gateway's hold under hostile clients (issue 65), on the SLURM lab: a normal client streams short chats
through the gateway and times its first byte, first alone, then beside 10 adversarial clients that send, over and
over, bodies just under the gateway's limit, bodies nested too deeply, half bodies that never finish, a forged
X-Clusterbook-Tier, and requests with tools. Reported side by side: the normal client's first-byte p50 and p99
alone and under attack (their ratio), its failures, every answer the adversaries got, and the hold service's
memory (its cgroup's peak) against its MemoryMax and its body limit.

Run as root from the project root with the SLURM lab up and its tiers and gateway deployed:
.venv/bin/python benchmarks/hold_hostile.py [--seconds 60] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.effects.ssh import SshTransport  # noqa: E402
from clusterbook.model.loader import load_cluster  # noqa: E402

SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"


def first_bytes(url: str, model: str, end: float, out: list, failures: list) -> None:
    """The normal client: a short streamed chat after another; the seconds to its first byte of body."""
    with httpx.Client(timeout=60) as http:
        while time.monotonic() < end:
            started = time.monotonic()
            try:
                with http.stream("POST", url, json={"model": model, "max_tokens": 4, "stream": True,
                                                    "messages": [{"role": "user", "content": "Say OK."}]}) as r:
                    chunks = r.iter_raw()
                    first = next(chunks, b"")
                    took = time.monotonic() - started
                    rest = b"".join(chunks)
                if r.status_code == 200 and first and b"[DONE]" in first + rest:
                    out.append(took)
                else:
                    failures.append(f"{r.status_code} {(first + rest)[:120]!r}")
            except Exception as exc:  # every failure counts, whatever it is
                failures.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.2)


def raw(host: str, port: int, head: bytes, body: bytes, hang_s: float = 0) -> str:
    """Send a hand-made request; the answer's status line ('-' when none came)."""
    try:
        with socket.create_connection((host, port), timeout=30) as s:
            s.sendall(head + body)
            if hang_s:
                time.sleep(hang_s)
            line = s.makefile("rb").readline().decode(errors="replace").strip()
            return " ".join(line.split()[1:2]) or "-"
    except OSError as exc:
        return type(exc).__name__


def adversary(kind: str, host: str, port: int, body_max: int, end: float, seen: collections.Counter,
              lock: threading.Lock) -> None:
    path = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    while time.monotonic() < end:
        if kind == "large":  # just under the limit: passed on unread by the hold, refused by the tier at once
            body = b'{"messages": "' + b"x" * (body_max - 200) + b'"}'
            answer = raw(host, port, path + f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
        elif kind == "over":  # over it: nginx answers 413
            body = b'{"messages": "' + b"x" * (body_max + 1000) + b'"}'
            answer = raw(host, port, path + f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
        elif kind == "deep":
            body = b'{"messages": ' + b"[" * 200_000
            answer = raw(host, port, path + f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
        elif kind == "half":  # a body that stops coming, then its client leaves: nginx never passes it on
            try:
                with socket.create_connection((host, port), timeout=30) as s:
                    s.sendall(path + b"Content-Length: 100000\r\n\r\n" + b'{"messages": [')
                    time.sleep(2)
                answer = "left"
            except OSError as exc:
                answer = type(exc).__name__
        elif kind == "forged":
            body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'
            answer = raw(host, port, path.replace(b"/v1/chat/completions", b"/wake/reasoning")
                         + b"X-Clusterbook-Tier: reasoning\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
        else:  # tools
            body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 4,
                               "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}).encode()
            answer = raw(host, port, path + f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
        with lock:
            seen[f"{kind} {answer}"] += 1


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def phase(url: str, model: str, seconds: float, attack: list | None, host: str, port: int, body_max: int) -> dict:
    end = time.monotonic() + seconds
    times, failures, seen, lock = [], [], collections.Counter(), threading.Lock()
    threads = [threading.Thread(target=first_bytes, args=(url, model, end, times, failures))]
    for kind in attack or []:
        threads.append(threading.Thread(target=adversary, args=(kind, host, port, body_max, end, seen, lock),
                                        daemon=True))
    for t in threads:
        t.start()
    threads[0].join()
    return {"requests": len(times), "p50_s": percentile(times, 0.5), "p99_s": percentile(times, 0.99),
            "mean_s": round(statistics.mean(times), 3) if times else None, "failed": len(failures),
            "failures": failures[:10], "adversaries_got": dict(seen)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--out", default=str(ROOT / "reports/hold-hostile.json"))
    args = parser.parse_args()
    c = load_cluster(SLURM_LAB)
    ssh = SshTransport(c, ROOT)
    gw, node = c.gateway.listen[0], c.gateway.node
    tier = next(t for t in c.tiers if t.name == "fast")
    port = next(r.port for r in c.gateway.routes if r.tier == tier.name)
    url, model = f"http://{gw}:{port}/v1/chat/completions", tier.served_models[0]
    body_max = c.gateway.body_max_mib << 20
    ssh.run(node, "systemctl restart clusterbook-wake && sleep 1")  # its memory peak counts from now
    alone = phase(url, model, args.seconds, None, gw, port, body_max)
    peak = "awk '/VmHWM/{print $2 * 1024}' /proc/$(systemctl show -p MainPID --value clusterbook-wake)/status"
    base = ssh.run(node, peak).stdout.strip()
    attack = ["large", "large", "large", "over", "deep", "deep", "half", "half", "forged", "tools"]
    hostile = phase(url, model, args.seconds, attack, gw, port, body_max)
    # its peak resident memory since the restart (the lab's nspawn containers have no memory controller for its
    # MemoryMax to act on: the kernel's high-water mark tells what it would have had to hold)
    memory = ssh.run(node, "pid=$(systemctl show -p MainPID --value clusterbook-wake); "
                           "awk '/VmHWM/{print $2 * 1024}' /proc/$pid/status; "
                           "systemctl show -p MemoryMax --value clusterbook-wake; "
                           "systemctl show -p NRestarts --value clusterbook-wake").stdout.split()
    report = {"seconds": args.seconds, "alone": alone, "under_attack": hostile, "adversaries": attack,
              "ratio_p99": round(hostile["p99_s"] / alone["p99_s"], 2) if alone["p99_s"] and hostile["p99_s"]
              else None,
              "hold_peak_rss_bytes_alone": int(base) if base.isdigit() else None,
              "hold_peak_rss_bytes": int(memory[0]) if memory and memory[0].isdigit() else None,
              "large_bodies_at_once": attack.count("large"),
              "hold_memory_max": memory[1] if len(memory) > 1 else None,
              "hold_restarts": memory[2] if len(memory) > 2 else None, "body_limit_bytes": body_max}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k not in ("alone", "under_attack")}, indent=1))
    for name in ("alone", "under_attack"):
        r = report[name]
        print(f"{name}: {r['requests']} streams, first byte p50 {r['p50_s']} s, p99 {r['p99_s']} s, "
              f"{r['failed']} failed; adversaries got {r['adversaries_got']}")
    return 0 if hostile["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
