"""The docs site command: a strict offline build in this process, or a live-reloading server."""

from __future__ import annotations

import base64
import io
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from clusterbook.commands import docs_export as export
from clusterbook.commands import settings
from clusterbook.commands.docs_inputs import build_docs_inputs, build_stamp, packed_site
from clusterbook.commands.runbooks import run_runbook
from clusterbook.commands.settings import Settings
from clusterbook.effects.console import Failed, console
from clusterbook.effects.files import no_links_inside
from clusterbook.model.loader import load_cluster

MERMAID = Path("docs/assets/vendor/mermaid.min.js")


def docs(s: Settings, cluster_file: str, out: str, serve: bool = False, address: str = "127.0.0.1:8000",
         built: str | None = None, markdown: str | None = None) -> None:
    """Build the docs site strictly (or serve it) from a cluster file; nothing is fetched from outside. With
    MARKDOWN, also write the pages as plain Markdown there, with an mkdocs.yml that needs no plugin (docs_export)."""
    site = build_docs_inputs(cluster_file, s)  # loaded once; bad input: FILE:LINE messages, before MkDocs
    if not MERMAID.exists():
        raise Failed(f"{MERMAID} is missing: run ./setup (it installs the npm package mermaid@11)")
    if serve:  # live reload rebuilds in MkDocs' own process: it reads the settings from the environment
        env = {**os.environ, **settings.as_environment(s, cluster=Path(cluster_file).resolve())}
        subprocess.run([sys.executable, "-m", "mkdocs", "serve", "--livereload", "-a", address], env=env)
        return
    from mkdocs.commands.build import build  # lazy, these three: MkDocs only for the docs tasks
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    no_links_inside(Path(out))
    started = time.monotonic()
    warnings = _Collect()
    logging.getLogger("mkdocs").addHandler(warnings)
    config = load_config("mkdocs.yml", site_dir=str(Path(out).resolve()), strict=True)
    config.plugins["clusterbook"].config.update(cluster_file=site.cluster_file, built_at=built or "",
                                                reports=str(s.reports), runs=str(s.runs))
    try:
        build(config)
    except MkDocsException as exc:
        raise Failed(f"mkdocs build failed: {exc}\n" + "\n".join(warnings.lines[-20:])) from None
    except SystemExit:  # mkdocs-macros exits on a macro error (on_error_fail); its message is in the warnings
        raise Failed("mkdocs build failed in a macro:\n" + "\n".join(warnings.lines[-5:])) from None
    finally:
        logging.getLogger("mkdocs").removeHandler(warnings)
    console.print(f"[green]built[/] {out}/ from {cluster_file} in {time.monotonic() - started:.1f} s; "
                  f"browse it with: invoke docs.serve (or python3 -m http.server -d {out})")
    if markdown:
        plugin = config.plugins["clusterbook"]
        text = export.plain_config(Path("mkdocs.yml").read_text(), config["nav"], config["site_name"],
                                   config["copyright"], config["site_url"])
        count = export.write_markdown(Path(markdown), plugin.expanded, plugin.files, text)
        console.print(f"[green]wrote[/] {markdown}/: {len(plugin.expanded)} pages expanded, {count} files, and an "
                      f"mkdocs.yml without plugins (build it with: mkdocs build -f {markdown}/mkdocs.yml, or "
                      f"zensical build -f {markdown}/mkdocs.yml)")


class _Collect(logging.Handler):
    """MkDocs' warnings, kept for the failure message (strict mode fails the build on any)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def publish(s: Settings, cluster_file: str, dry: bool) -> None:
    """Build the site, pack it, and unpack it on the gateway node, where nginx serves it (runbook publish-docs)."""


    cluster = load_cluster(cluster_file)
    if not cluster.gateway or not cluster.gateway.docs_port:
        raise Failed(f"{cluster_file}: the gateway has no docs_port: nowhere to publish the site "
                     "(set gateway.docs_port)")
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory() as out:
        docs(s, cluster_file, out, built=built)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(out, arcname=".", filter=_readable)
    packed = base64.b64encode(buffer.getvalue()).decode()
    console.print(f"packed the site: {len(buffer.getvalue()) / 1e6:.1f} MB")
    stamp = build_stamp(build_docs_inputs(cluster_file, s), built)
    gateway = cluster.gateway
    run_runbook(s, "publish-docs", cluster_file, dry=dry, variables={"build_id": built},
                extra_artifacts=[packed_site(cluster, packed)])
    if not dry:
        where = f"http://{gateway.listen[0]}:{gateway.docs_port}/" + (f" and {gateway.url}/docs/" if gateway.url
                                                                    else "")
        console.print(f"[green]published[/] on {gateway.node}: {where} ({stamp})")


def _readable(info):
    """Every packed file readable by nginx's user, owned by root (the build's temporary folder is private)."""
    info.mode = 0o755 if info.isdir() else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
