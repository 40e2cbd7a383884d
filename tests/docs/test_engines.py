"""The site engine's future (issue 45 item 8): `invoke docs --markdown` writes the pages expanded, and MkDocs alone
and Zensical (Material's successor) each build that folder into the same pages, with nothing active in them."""

import contextlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterbook.commands.docs_build import docs
from clusterbook.commands.settings import of as settings_of
from clusterbook.model.loader import load_cluster
from clusterbook.pure.mdtext import active_content

ROOT = Path(__file__).resolve().parents[2]
ZENSICAL = ROOT / ".venv-zensical/bin/zensical"  # ./setup installs it in a virtual environment of its own
needs_mermaid = pytest.mark.skipif(not (ROOT / "docs/assets/vendor/mermaid.min.js").exists(),
                                   reason="run ./setup: it installs mermaid.min.js")
pytestmark = needs_mermaid


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """beefcake2's site as `invoke docs --markdown` builds it: (the site MkDocs built with the plugin, the folder)."""
    site, folder = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("markdown")
    with contextlib.chdir(ROOT):
        docs(settings_of({}), "cluster.yaml", str(site), markdown=str(folder))
    return site, folder


def pages(site: Path) -> dict[str, str]:
    """Each page's article (the content, without the theme's frame), by its path in the site."""
    out = {}
    for path in sorted(site.rglob("*.html")):
        text = path.read_text()
        article = re.search(r"<article[^>]*>(.*)</article>", text, re.S)
        out[str(path.relative_to(site))] = article.group(1) if article else ""
    return out


def headings(article: str) -> list[str]:
    return re.findall(r'<h[1-4][^>]*id="([^"]+)"', article)


def test_the_folder_needs_no_plugin_and_holds_expanded_pages(exported):
    _, folder = exported
    config = (folder / "mkdocs.yml").read_text()
    plugins = yaml.safe_load(config.split("\nmarkdown_extensions:")[0])["plugins"]  # python/name tags come later
    assert plugins == ["search"], plugins
    index = (folder / "docs/index.md").read_text()
    assert "{{" not in index and "{%" not in index, index[:500]  # the macros are expanded
    assert load_cluster(ROOT / "cluster.yaml").cluster.name in index
    runbook = (folder / "docs/runbooks/deploy-slurm-reasoning.md").read_text()
    assert runbook.startswith("---\ntitle: ") and "render_macros" not in runbook  # only what an engine reads


def test_mkdocs_alone_builds_the_same_pages(exported, tmp_path):
    site, folder = exported
    run = subprocess.run([str(ROOT / ".venv/bin/mkdocs"), "build", "-q", "-f", str(folder / "mkdocs.yml"),
                          "-d", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    mine, theirs = pages(site), pages(tmp_path / "out")
    assert mine.keys() == theirs.keys()
    for page, article in mine.items():
        assert headings(theirs[page]) == headings(article), page


@pytest.mark.skipif(not ZENSICAL.exists(), reason="run ./setup: it installs Zensical into .venv-zensical")
def test_zensical_builds_the_same_pages_with_nothing_active(exported):
    site, folder = exported
    run = subprocess.run([str(ZENSICAL), "build", "-f", str(folder / "mkdocs.yml")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "Build finished" in run.stdout + run.stderr, run.stdout + run.stderr
    mine, theirs = pages(site), pages(folder / "site")
    assert mine.keys() == theirs.keys()
    for page, article in mine.items():
        assert headings(theirs[page]) == headings(article), page
        assert active_content(theirs[page]) == [], page
    cluster = load_cluster(ROOT / "cluster.yaml")
    tiers = theirs["tiers/index.html"]
    for tier in cluster.tiers:  # values from the cluster file reach Zensical's pages
        assert tier.name in tiers and str(tier.port) in tiers, tier.name
