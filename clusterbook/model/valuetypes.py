"""String types of the cluster file: each says what a value is, so nothing that reaches a generated file can
carry a newline, a shell metacharacter, a systemd specifier or a path that climbs out of its place. Every pattern
matches the whole value (fullmatch: `$` alone would let a trailing newline through) and ASCII only."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # every control character but tab and newline
# Characters that change how text around them reads without showing themselves: bidirectional overrides and
# isolates (Trojan Source), zero-width spaces and joiners, line and paragraph separators, the byte-order mark.
INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
PATH_PART = r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*"
ABS_PATH = re.compile(rf"^(/{PATH_PART})+/?$|^/$")
HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST = re.compile(rf"^{HOST_LABEL}(\.{HOST_LABEL})*\.?$")
URL_SAFE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!&'()*+,;=%-]+")
IP_CHARACTERS = re.compile(r"[0-9A-Fa-f:.]+")  # digits, hex, colons and dots: no zone id


def _single_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be one line (no line breaks)")
    if "\t" in value or CONTROL.search(value):
        raise ValueError("must not contain control characters")
    _visible(value)
    return value


def _visible(value: str) -> str:
    if found := INVISIBLE.search(value):
        raise ValueError(f"must not contain invisible or direction-changing characters (U+{ord(found[0]):04X}): "
                         "what a page or a terminal shows would differ from what runs")
    return value


def _multi_line(value: str) -> str:
    if CONTROL.search(value.replace("\r\n", "\n")):
        raise ValueError("must not contain control characters")
    return _visible(value)


def _absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path (start with /): the nodes have no working directory to "
                         "resolve it against")
    parts = value.strip("/").split("/")
    if ".." in parts or "." in parts or "//" in value:
        raise ValueError("must be a normalized absolute path: no '..', '.' or '//' parts")
    if not ABS_PATH.fullmatch(value):
        raise ValueError("may only contain letters, digits and . _ @ + - between slashes")
    if value != "/" and posixpath.normpath(value) != value.rstrip("/"):
        raise ValueError("must be a normalized absolute path")
    return value


def _local_path(value: str) -> str:
    """A path on the operator's machine (an SSH key, known_hosts): relative or absolute, but plain."""
    _single_line(value)
    if not re.fullmatch(r"~?[A-Za-z0-9._@+/-]+", value):
        raise ValueError("may only contain letters, digits, / and . _ @ + - (and a leading ~)")
    return value


def _host(value: str) -> str:
    """An RFC 1123 host name or an IP address (without an IPv6 zone id: `%` carries anything after it)."""
    if IP_CHARACTERS.fullmatch(value):
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            pass
    if len(value) > 253 or not HOST.fullmatch(value):
        raise ValueError("must be a host name (letters, digits and -, dot-separated labels of at most 63) or an IP "
                         "address")
    return value


def _url(value: str) -> str:
    _single_line(value)
    if not URL_SAFE.fullmatch(value):
        raise ValueError("must be a URL without spaces or quotes (percent-encode them)")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user:password@): the docs, the logs and every node's command "
                         "lines would show them")
    _host(parts.hostname)
    return value


def _no_dot_segments(value: str) -> str:
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError("must not contain '.' or '..' segments")
    return value


def _ip(value: str) -> str:
    try:
        if not IP_CHARACTERS.fullmatch(value):
            raise ValueError
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError("must be an IP address (IPv4, or IPv6 without a zone id)") from None
    return value


# A name: identifiers of nodes, tiers, models, networks (they become unit names, file names and URLs).
Name = Annotated[str, Field(title="name", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64,
                            description="a name: letters, digits, . _ -")]
# Text that goes only into Markdown (descriptions, symptoms, decisions): may span lines.
Prose = Annotated[str, AfterValidator(_multi_line), Field(title="text", max_length=20_000)]
# Text that reaches a generated file as a comment or a description: one line, no control characters.
Line = Annotated[str, AfterValidator(_single_line), Field(title="one-line text", max_length=500)]
AbsPath = Annotated[str, AfterValidator(_absolute_path), Field(title="absolute path", max_length=255)]
LocalPath = Annotated[str, AfterValidator(_local_path), Field(title="local path", max_length=255)]
HostName = Annotated[str, AfterValidator(_host), Field(title="host name or IP")]
IpAddress = Annotated[str, AfterValidator(_ip), Field(title="IP address")]
Url = Annotated[str, AfterValidator(_url), Field(title="http(s) URL", max_length=2000)]
# A file in a download repository: a file name, or folders and a file name (Hugging Face keeps split GGUF files
# in folders: Q8_0/Model-Q8_0-00001-of-00002.gguf); the node stores it under its last part.
RepoFile = Annotated[str, AfterValidator(_no_dot_segments),
                     Field(title="repository file", pattern=r"^([A-Za-z0-9_@+-][A-Za-z0-9._@+-]*/){0,8}"
                                                            r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*$", max_length=255)]
# A file name (no directory part) of a binary or a model.
FileName = Annotated[str, Field(title="file name", pattern=r"^[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*$", max_length=255)]
UserName = Annotated[str, Field(title="user name", pattern=r"^[a-z_][a-z0-9_-]*$", max_length=32)]
# SLURM partition, QoS and gres names.
SlurmName = Annotated[str, Field(title="SLURM name", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=64)]
Gres = Annotated[str, Field(title="SLURM gres", pattern=r"^[a-z]+(:[A-Za-z0-9_.-]+)?:[0-9]{1,4}$", max_length=64)]
SlurmTime = Annotated[str, Field(title="SLURM time",
                                 pattern=r"^(UNLIMITED|infinite|([0-9]{1,4}-)?[0-9]{1,6}(:[0-9]{2}){0,2})$")]
Quantization = Annotated[str, Field(title="GGUF file type", pattern=r"^[A-Za-z0-9_]+$", max_length=32)]
Repo = Annotated[str, AfterValidator(_no_dot_segments),
                 Field(title="repository path", pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$", max_length=200)]
UrlPath = Annotated[str, AfterValidator(_no_dot_segments),
                    Field(title="URL path", pattern=r"^/([A-Za-z0-9._-]+/)*$", max_length=200)]
Email = Annotated[str, Field(title="e-mail address", max_length=254,
                             pattern=r"^[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,63}$")]
HostPort = Annotated[str, Field(title="host:port", max_length=260,
                                pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?:[1-9][0-9]{0,4}$")]
Tag = Annotated[str, Field(title="tag", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+-]*$", max_length=64)]
