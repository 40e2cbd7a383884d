"""Hosts as data for host-free tests of the executor: files on each host and how commands end there; every call
is recorded. This is not a fake of systemd or SSH: the lab tests prove those for real."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field

from clusterbook.effects.transport import UNREACHABLE, Result


@dataclass
class Rule:
    """Commands on a host matching `pattern` end with this exit status and output."""

    pattern: str
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class FakeHosts:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    rules: dict[str, list[Rule]] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def run(self, host: str, command: str, timeout: float = 120, stdin: bytes | None = None) -> Result:
        self.calls.append(("run", host, command))
        if host in self.unreachable:
            return Result(host, command, UNREACHABLE, "", f"ssh: connect to host {host} port 22: No route to host")
        if command.startswith("sha256sum ") and "\n" not in command:  # one file's (a look-ahead script: no answer)
            path = shlex.split(command)[1]
            content = self.files.get(host, {}).get(path)
            return Result(host, command, 0, f"{hashlib.sha256(content).hexdigest()}  {path}\n" if content else "", "")
        for rule in self.rules.get(host, []):
            if re.search(rule.pattern, command):
                return Result(host, command, rule.returncode, rule.stdout, rule.stderr)
        return Result(host, command, 0, "", "")

    def put(self, host: str, path: str, content: bytes, mode: int, timeout: float = 120) -> Result:
        self.calls.append(("put", host, path))
        if host in self.unreachable:
            return Result(host, path, UNREACHABLE, "", f"ssh: connect to host {host} port 22: No route to host")
        self.files.setdefault(host, {})[path] = content
        return Result(host, f"put {path}", 0, "", "")

    def get(self, host: str, path: str, timeout: float = 60) -> bytes | None:
        return self.files.get(host, {}).get(path)

    def close(self, host: str) -> None:
        return None
