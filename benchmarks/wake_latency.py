"""How much later than its data a thread that slept in recv() wakes, against how long it slept (issue 48).

Two processes over a socket pair: one sends a request and waits for the reply, blocked in recv() or polling without
sleeping; the other busy-waits the given time (as an RPC worker waits for its GPU, CUDA spinning) and replies. The
time past the busy-wait is the hand-off: a wake-up plus this script's own overhead (Python, ~30 us). An RPC hop has
two such waits per token, the head's for the worker's half and the worker's for the head's half: 2 ms each for the
8B-shaped model on 2 x H200, 12 ms for the 72B-shaped one. Usage: python3 wake_latency.py [ROUNDS]
"""
import os
import socket
import statistics
import sys
import time

WAITS_US = (1000, 2000, 6000, 12000, 20000)


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def replier(sock: socket.socket) -> None:
    while message := sock.recv(64):
        busy(int(message) / 1e6)
        sock.sendall(b"x")
    os._exit(0)


def ask(sock: socket.socket, wait_us: int, spin: bool) -> float:
    """Microseconds past wait_us until the reply was read."""
    start = time.perf_counter()
    sock.sendall(str(wait_us).encode())
    if spin:
        sock.setblocking(False)
        while True:
            try:
                sock.recv(1)
                break
            except BlockingIOError:
                pass
        sock.setblocking(True)
    else:
        sock.recv(1)
    return (time.perf_counter() - start) * 1e6 - wait_us


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.fork() == 0:
        mine.close()
        replier(theirs)
    theirs.close()
    print(f"{os.cpu_count()} CPUs; {rounds} requests each; the hand-off past the other side's busy-wait, in us")
    for spin in (False, True):
        for wait_us in WAITS_US:
            extra = sorted(ask(mine, wait_us, spin) for _ in range(rounds))
            print(f"{'polling' if spin else 'blocked in recv()'}, the other side busy {wait_us / 1000:.0f} ms: "
                  f"median {statistics.median(extra):.0f}, p90 {extra[int(0.9 * len(extra))]:.0f}")
    mine.close()


if __name__ == "__main__":
    main()
