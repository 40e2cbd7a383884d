"""The docs site command: a strict offline build, or a live-reloading server."""

from __future__ import annotations

from pathlib import Path

from clusterbook.effects.console import Failed, console
from clusterbook.model.loader import load_cluster

MERMAID = Path("docs/assets/vendor/mermaid.min.js")


def docs(cluster_file: str, out: str, serve: bool = False, address: str = "127.0.0.1:8000") -> None:
    """Build the docs site strictly (or serve it) from a cluster file; nothing is fetched from outside."""
    import os
    import subprocess
    import sys
    import time as _time

    load_cluster(cluster_file)  # bad input: the usual FILE:LINE messages, before MkDocs starts
    if not MERMAID.exists():
        raise Failed(f"{MERMAID} is missing: run ./setup (it installs the npm package mermaid@11)")
    env = {**os.environ, "CLUSTERBOOK_CLUSTER": str(Path(cluster_file).resolve()), "NO_MKDOCS_2_WARNING": "1",
           "DISABLE_MKDOCS_2_WARNING": "true"}
    if serve:
        subprocess.run([sys.executable, "-m", "mkdocs", "serve", "--livereload", "-a", address], env=env)
        return
    started = _time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(f"mkdocs build failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")
    console.print(f"[green]built[/] {out}/ from {cluster_file} in {_time.monotonic() - started:.1f} s; "
                  f"browse it with: invoke docs.serve (or python3 -m http.server -d {out})")
