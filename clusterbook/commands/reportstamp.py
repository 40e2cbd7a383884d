"""Which cluster file a report measured: a stamp on its first line, so a site shows only its own cluster's results."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

STAMP = re.compile(r"^<!-- clusterbook report: cluster (\S+) file (\S+) sha256 ([0-9a-f]{64}) -->\n")


def file_digest(cluster_file: str | Path) -> str:
    return hashlib.sha256(Path(cluster_file).read_bytes()).hexdigest()


def stamped(markdown: str, cluster_name: str, cluster_file: str | Path) -> str:
    """The report with its stamp: the cluster's name, the file's path and the digest of its bytes."""
    path = str(cluster_file).replace(" ", "%20")
    return f"<!-- clusterbook report: cluster {cluster_name} file {path} sha256 {file_digest(cluster_file)} -->\n" \
        + markdown


def report_for(text: str, cluster_name: str, cluster_file: str | Path) -> tuple[str | None, str]:
    """(the report without its stamp, "") when it measured this cluster file as it is now; else (None, why not)."""
    match = STAMP.match(text)
    if not match:
        return None, "the latest report does not say which cluster file it measured"
    name, _path, digest = match.groups()
    if digest != file_digest(cluster_file):
        return None, f"the latest report is of {name}" if name != cluster_name else \
            "the latest report measured this cluster file as it was before its last change"
    return text[match.end():], ""
