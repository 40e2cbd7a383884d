"""The docs as plain Markdown: every page with its macros expanded, every generated file, and an mkdocs.yml without
clusterbook's plugin, so that any MkDocs-compatible engine (MkDocs itself, Material's successor Zensical) builds
the same site from the folder alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from clusterbook.effects.console import Failed
from clusterbook.effects.files import inside, no_links_inside

PLUGIN = "clusterbook"
KEPT_OUT = ("watch",)  # what only `invoke docs.serve` reads


class PythonName(str):
    """A `!!python/name:` value of mkdocs.yml (a function a Markdown extension is configured with), kept as written."""


class _Loader(yaml.SafeLoader):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Loader.add_multi_constructor("tag:yaml.org,2002:python/name:",
                              lambda loader, suffix, node: PythonName(suffix))
_Dumper.add_representer(PythonName, lambda dumper, value: dumper.represent_scalar(
    f"tag:yaml.org,2002:python/name:{value}", ""))


def plain_config(source: str, nav: list, site_name: str, copyright: str, site_url: str | None) -> str:
    """mkdocs.yml for the exported folder: the project's, with the navigation filled, the names the plugin sets
    written in, and clusterbook's plugin left out (its work is done: the pages are expanded)."""
    config = yaml.load(source, Loader=_Loader)
    config["plugins"] = [p for p in config.get("plugins", []) if p != PLUGIN and not (isinstance(p, dict)
                                                                                     and PLUGIN in p)]
    for key in KEPT_OUT:
        config.pop(key, None)
    config.update(site_name=site_name, copyright=copyright, nav=nav, docs_dir="docs", site_dir="site")
    if site_url:
        config["site_url"] = site_url
    return ("# Written by `invoke docs --markdown`: the pages are expanded, so no plugin of clusterbook's is needed.\n"
            + yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120))


def front_matter(meta: dict) -> str:
    """The page's title, where it had one of its own (a generated runbook page); nothing else is needed any more."""
    return f"---\n{yaml.safe_dump({'title': meta['title']}, allow_unicode=True)}---\n\n" if meta.get("title") else ""


def write_markdown(out: Path, pages: dict[str, tuple[dict, str]], files, config_text: str) -> int:
    """Write the folder: OUT/mkdocs.yml and OUT/docs/ with each page's expanded Markdown and every other file of
    the build (assets, pictures, downloads); how many files. OUT is made again."""
    no_links_inside(out)
    if out.exists() and any(out.iterdir()) and not (out / "mkdocs.yml").exists():
        raise Failed(f"{out}: not empty and not a folder `invoke docs --markdown` wrote; choose another")
    shutil.rmtree(out / "docs", ignore_errors=True)
    shutil.rmtree(out / "site", ignore_errors=True)
    docs = out / "docs"
    count = 0
    for f in files:
        target = inside(docs, f.src_uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.src_uri in pages:
            meta, markdown = pages[f.src_uri]
            target.write_text(front_matter(meta) + markdown)
        else:
            target.write_bytes(f.content_bytes)
        count += 1
    (out / "mkdocs.yml").write_text(config_text)
    return count
