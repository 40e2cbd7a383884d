"""Check rendered files with the real tools: systemd-analyze verify, bash -n, shellcheck, nginx -t, nft -c,
promtool (check config, check rules, test rules) and amtool check-config."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.files import artifact_path, write_tree
from clusterbook.pure.render.artifacts import Artifact

TOOLS = {  # executable -> Debian package that provides it
    "systemd-analyze": "systemd",
    "bash": "bash",
    "shellcheck": "shellcheck",
    "nginx": "nginx-light",
    "nft": "nftables",
    "unshare": "util-linux",
    "ip": "iproute2",
    "promtool": "prometheus",
    "amtool": "prometheus-alertmanager",
}
SYSTEM_UNITS = Path("/lib/systemd/system")
PROMTOOL = {"prometheus": ["check", "config", "--syntax-only"], "rules": ["check", "rules"],
            "rule-tests": ["test", "rules"]}


@dataclass(frozen=True)
class Verdict:
    """One validator's result on one generated file."""

    node: str
    path: str
    validator: str
    ok: bool
    output: str = ""


class MissingTools(Exception):
    """A validator's tool is not installed; the message names the apt command that fixes it."""


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({TOOLS[t] for t in missing}))
        raise MissingTools(f"missing validators: {', '.join(missing)}; install them with: "
                           f"apt-get install -y {packages}")


def _run(argv: list[str], cwd: Path | None = None) -> tuple[bool, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def validate(artifacts: list[Artifact]) -> list[Verdict]:
    """Run every validator that applies to each artifact; nothing is skipped (MissingTools if a tool is absent)."""
    require_tools()
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="clusterbook-check-") as tmp:
        roots = Path(tmp)
        write_tree(artifacts, roots)
        for node in sorted({a.node for a in artifacts}):
            mine = [a for a in artifacts if a.node == node]
            verdicts += _units(roots / node, [a for a in mine if a.kind == "unit"])
            for a in mine:
                verdicts += _single(roots, a)
            verdicts += _nginx(roots / node, [a for a in mine if a.kind == "nginx"])
    return verdicts


def _single(roots: Path, a: Artifact) -> list[Verdict]:
    path = artifact_path(roots, a)
    if a.kind == "script":
        out = []
        for name, argv in (("bash -n", ["bash", "-n", str(path)]), ("shellcheck", ["shellcheck", "-x", str(path)])):
            ok, text = _run(argv)
            out.append(Verdict(a.node, a.path, name, ok, text))
        return out
    if a.kind == "nftables":
        ok, text = _run(["nft", "-c", "-f", str(path)])
        return [Verdict(a.node, a.path, "nft -c", ok, text)]
    if a.kind in PROMTOOL:  # each file beside the others of its node: the configuration names the rules
        ok, text = _run(["promtool", *PROMTOOL[a.kind], path.name], cwd=path.parent)
        return [Verdict(a.node, a.path, "promtool " + " ".join(PROMTOOL[a.kind][:2]), ok, text)]
    if a.kind == "python":
        ok, text = _run(["python3", "-m", "py_compile", str(path)])
        return [Verdict(a.node, a.path, "python3 -m py_compile", ok, text)]
    if a.kind == "json":
        try:
            json.loads(a.text)
            return [Verdict(a.node, a.path, "json syntax", True)]
        except ValueError as exc:
            return [Verdict(a.node, a.path, "json syntax", False, str(exc))]
    if a.kind == "alertmanager":
        ok, text = _run(["amtool", "check-config", str(path)])
        return [Verdict(a.node, a.path, "amtool check-config", ok, text)]
    if a.kind == "env":  # systemd's EnvironmentFile (and a shell) read a double-quoted value with spaces alike
        bad = [line for line in a.text.splitlines() if line and not line.startswith("#")
               and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=([^\s\"'\\$`]*|\"[^\"\\$`]*\")$", line)]
        return [Verdict(a.node, a.path, "env syntax", not bad, "\n".join(f"not KEY=VALUE: {b}" for b in bad))]
    if a.kind == "ini":
        parser = configparser.ConfigParser(comment_prefixes=(";", "#"))
        try:
            parser.read_string(a.text)
            return [Verdict(a.node, a.path, "ini syntax", True)]
        except configparser.Error as exc:
            return [Verdict(a.node, a.path, "ini syntax", False, str(exc))]
    return []


def _units(root: Path, units: list[Artifact]) -> list[Verdict]:
    """systemd-analyze verify inside a root holding the node's files and the host's system units.

    The llama.cpp binaries and numactl named by ExecStart= are installed by the install runbook, not rendered;
    empty stand-ins are placed at those paths so verify checks everything else about the unit.
    """
    if not units:
        return []
    system = root / "usr/lib/systemd/system"
    if not system.exists():
        shutil.copytree(SYSTEM_UNITS, system, symlinks=True)
    for a in units:
        for exe in re.findall(r"^ExecStart=(\S+)", a.text, flags=re.M):
            stand_in = root / exe.lstrip("/")
            if not stand_in.exists():
                stand_in.parent.mkdir(parents=True, exist_ok=True)
                stand_in.write_text("#!/bin/sh\n")
                stand_in.chmod(0o755)
    verdicts = []
    for a in units:
        ok, text = _run(["systemd-analyze", "verify", f"--root={root}", "--man=no", a.path])
        verdicts.append(Verdict(a.node, a.path, "systemd-analyze verify", ok, text))
    return verdicts


def _nginx(root: Path, files: list[Artifact]) -> list[Verdict]:
    """nginx -t on a minimal nginx.conf that includes the rendered site, its includes pointed into the root."""
    sites = [a for a in files if "/sites-available/" in a.path]
    if not sites:
        return []
    verdicts = []
    for site in sites:
        site_path = root / site.path.lstrip("/")
        text = re.sub(r"^(\s*include\s+)/", rf"\g<1>{root}/", site.text, flags=re.M)
        checked = site_path.with_suffix(".checked.conf")
        checked.write_text(text)
        conf = root / "nginx-check.conf"
        conf.write_text(f"pid {root}/nginx.pid;\nevents {{}}\nhttp {{\n    include {checked};\n}}\n")
        # nginx -t binds its listen addresses: give it a private network namespace that has them.
        addresses = sorted(set(re.findall(r"^\s*listen\s+([0-9.]+):\d+;", text, flags=re.M)))
        setup = "ip link set lo up" + "".join(f" && ip addr add {a}/32 dev lo" for a in addresses)
        nginx = f"nginx -t -q -e stderr -p {root} -c {conf}"
        ok, out = _run(["unshare", "--net", "sh", "-c", f"{setup} && {nginx}"])
        verdicts.append(Verdict(site.node, site.path, "nginx -t", ok, out))
    return verdicts
