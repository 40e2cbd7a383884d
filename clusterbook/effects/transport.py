"""How commands reach a host: the one interface every transport implements (run, put, get, close), the result
of a command, and the local transport (this machine, for rehearsals and host-free use)."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Result:
    """What a command did on a host."""

    host: str
    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 10) -> str:
        return "\n".join(self.stderr.strip().splitlines()[-lines:])


UNREACHABLE = 255  # what OpenSSH exits with when it cannot reach the host


class Transport(Protocol):
    """Runs shell commands on hosts and moves files to and from them."""

    def run(self, host: str, command: str, timeout: float = 120, stdin: bytes | None = None) -> Result: ...

    def put(self, host: str, path: str, content: bytes, mode: int, timeout: float = 120) -> Result: ...

    def get(self, host: str, path: str, timeout: float = 60) -> bytes | None: ...

    def close(self, host: str) -> None: ...


def put_command(path: str, mode: int) -> str:
    """The shell that writes stdin to path atomically with its mode (what put runs on a shell transport)."""
    directory = shlex.quote(path.rsplit("/", 1)[0] or "/")
    target = shlex.quote(path)
    return (f"mkdir -p {directory} && cat > {target}.clusterbook && chmod {mode:o} {target}.clusterbook "
            f"&& mv {target}.clusterbook {target}")


class ShellTransport:
    """put and get in terms of run: any transport that runs shell commands gets them from here."""

    def run(self, host: str, command: str, timeout: float = 120, stdin: bytes | None = None) -> Result:
        raise NotImplementedError

    def put(self, host: str, path: str, content: bytes, mode: int, timeout: float = 120) -> Result:
        return self.run(host, put_command(path, mode), timeout=timeout, stdin=content)

    def get(self, host: str, path: str, timeout: float = 60) -> bytes | None:
        result = self.run(host, f"cat {shlex.quote(path)}", timeout=timeout)
        return result.stdout.encode() if result.ok else None

    def close(self, host: str) -> None:
        return None


class LocalTransport(ShellTransport):
    """Runs every host's commands on this machine with bash (a rehearsal, or a one-machine cluster)."""

    def run(self, host: str, command: str, timeout: float = 120, stdin: bytes | None = None) -> Result:
        try:
            proc = subprocess.run(["bash", "-c", command], input=stdin, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Result(host, command, 124, "", f"timed out after {timeout:g} s")
        return Result(host, command, proc.returncode, proc.stdout.decode(errors="replace"),
                      proc.stderr.decode(errors="replace"))
