"""The renderers' second wall: every value a template emits is checked (and escaped) for the file's language;
a value that cannot be written safely is refused, never emitted."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from clusterbook.model.problems import Refused

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Characters a plain value may not carry in each language (beyond line breaks and control characters).
UNSAFE = {
    # shell words: anything outside shlex.quote's safe set, except the space of a comment or a word list
    "shell": re.compile(r"[^A-Za-z0-9_@%+=:,./ -]"),
    # unit files: $ expands variables, \ escapes, quotes group words; % is escaped, not refused
    "systemd": re.compile(r"[$\\\"'`]"),
    # EnvironmentFile lines: no quoting or expansion, so nothing that a reader would treat specially
    "env": re.compile(r"[$\\\"'`\s]"),
    "nginx": re.compile(r"[;{}\"'$\\`#]"),
    "nft": re.compile(r"[;{}\"'$\\`#]"),
    "ini": re.compile(r"[\[\];#\"'\\`]"),
    "slurm": re.compile(r"[#\"'$\\`;]"),
}
# Which language each template writes.
LANGUAGE = {
    "model-selector.sh.j2": "shell", "tier.sbatch.j2": "shell", "upstream-updater.sh.j2": "shell",
    "gpu-metrics.sh.j2": "shell", "scrape-targets.sh.j2": "shell",
    "tailscale-serve.sh.j2": "shell", "clusterbook-jobs.sh.j2": "shell",
    "firewalld-open.sh.j2": "shell", "monitoring-releases.sh.j2": "shell",
    "nginx-selinux.sh.j2": "shell", "daemon.service.j2": "systemd",
    "nginx-too-large.conf.j2": "nginx",
    "nginx-wake.conf.j2": "nginx", "nginx-hold.conf.j2": "nginx", "nginx-busy.conf.j2": "nginx",
    "server.service.j2": "systemd", "oneshot.service.j2": "systemd", "periodic.timer.j2": "systemd",
    "firewall.service.j2": "systemd", "tier.env.j2": "env", "nginx-site.conf.j2": "nginx",
    "upstream.conf.j2": "nginx", "nftables-rpc.nft.j2": "nft", "models-preset.ini.j2": "ini",
    "slurm.conf.j2": "slurm", "path-trigger.path.j2": "systemd",
}


class UnsafeValue(Refused):
    """A value that cannot be written into a generated file without changing what the file says."""


class Quoted(str):
    """Text clusterbook built for the target language itself, from typed values (a command line quoted word by
    word): it may span lines, but never carries control characters."""


def guard(language: str) -> Callable[[object], object]:
    """Jinja's finalize for one language: check every emitted value, escape what the language needs escaped."""
    unsafe = UNSAFE[language]

    def finalize(value: object) -> object:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        text = str(value)
        if isinstance(value, Quoted):
            if CONTROL.search(text):
                raise UnsafeValue(f"control character in {text[:60]!r}")
        elif "\n" in text or "\r" in text or "\t" in text or CONTROL.search(text):
            raise UnsafeValue(f"a line break or control character in {text[:60]!r} ({language} file)")
        elif m := unsafe.search(text):
            raise UnsafeValue(f"{m.group()!r} in {text[:60]!r} cannot be written safely into a {language} file")
        return text.replace("%", "%%") if language == "systemd" else text

    return finalize


def checked_target(path: str) -> str:
    """A generated file's path on its node: absolute and normalized, so it cannot climb out of its place."""
    if not path.startswith("/") or posixpath.normpath(path) != path or "//" in path or "\x00" in path:
        raise UnsafeValue(f"target path {path!r} is not a normalized absolute path")
    return path
