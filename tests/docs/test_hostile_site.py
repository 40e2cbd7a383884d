"""Script and link payloads in every kind of text field of beefcake2's file: the site shows them as text, and no
page's content holds anything active (the build's last wall would refuse it)."""

import copy
import re
from pathlib import Path

import markdown
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from clusterbook.commands.docs_build import docs
from clusterbook.commands.settings import of as settings_of
from clusterbook.model.schema import Cluster
from clusterbook.pure import docpages as pages
from clusterbook.pure.mdtext import active_content, fence_for, prose_inline, text
from tests.conftest import whole_text

ROOT = Path(__file__).resolve().parents[2]
needs_mermaid = pytest.mark.skipif(not (ROOT / "docs/assets/vendor/mermaid.min.js").exists(),
                                   reason="run ./setup: it installs mermaid.min.js")
SCRIPT = "<script>alert('cb')</script>"
PROSE = (f"{SCRIPT} [x](javascript:alert(1)) {{: onmouseover=alert(2) }} <img src=x onerror=alert(3)>\n\n"
         "[ref]: javascript:alert(4)\n\nsee [ref] <a href='javascript:alert(5)'>a</a>")
BEEFCAKE2 = whole_text()
BEEFCAKE2_DATA = yaml.load(BEEFCAKE2, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # copied per example
PROSE_FIELDS = {"description", "cause", "context", "why"}  # may span lines (cluster.description too)
LINE = "<img src=x onerror=alert(6)> [y](javascript:alert(7)) {: onclick=alert(8) } `x` | ]]"
TITLE = "x </title><script>alert(10)</script> <img src=x onerror=alert(11)> & [z](https://elsewhere.example)"


def hostile_cluster(tmp_path: Path) -> Path:
    data = yaml.safe_load(whole_text())
    data["cluster"]["description"] = PROSE
    data["tiers"][0]["description"] = LINE
    trouble = data["troubleshooting"][0]
    trouble["symptom"] = SCRIPT
    trouble["cause"] = PROSE
    trouble["fix"].append({"hosts": "local", "run": "echo '\n````\n" + SCRIPT + "\n```'"})
    decision = data["decisions"][0]
    decision["title"] = LINE
    decision["context"] = PROSE
    decision["sources"] = [LINE]
    data["router"]["rules"][0]["why"] = PROSE
    data["slurm_site"]["qos"][0]["used_by"] = '"><svg onload=alert(9)>'
    data["slurm_site"]["partitions"] = {name: LINE for name in data["slurm_site"]["partitions"]}
    data["legacy"]["source"] = TITLE  # in runbook titles: the page's <title> and the navigation of every page
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))
    return path


def page_contents(site: Path) -> dict[str, str]:
    """Each page's content (Material's article), where the cluster's values land; the theme's own scripts are
    outside it."""
    out = {}
    for page in site.rglob("*.html"):
        found = re.search(r'<article class="md-content__inner md-typeset">(.*?)</article>', page.read_text(), re.S)
        if found:
            out[str(page.relative_to(site))] = found.group(1)
    return out


@needs_mermaid
def test_payloads_show_as_text_and_nothing_is_active(tmp_path):
    docs(settings_of({}), str(hostile_cluster(tmp_path)), str(tmp_path / "site"))
    contents = page_contents(tmp_path / "site")
    assert len(contents) > 20
    for page, html in contents.items():
        assert active_content(html) == [], page
        assert "<script" not in html, page
    for page in (tmp_path / "site").rglob("*.html"):  # the whole page: <title> and navigation too (issue 44)
        whole = page.read_text()
        assert "<script>alert" not in whole and "onerror=alert(11)>" not in whole.replace("&gt;", ""), page
        assert 'href="https://elsewhere.example"' not in whole, page
    assert [p.name for p in (tmp_path / "site/files").rglob("*.html")] == ["index.html"]  # the files page only
    retire = (tmp_path / "site/runbooks/retire-legacy/index.html").read_text()
    assert "<title>Retire what ran before clusterbook (x ‹/title›‹script›alert(10)" in retire
    everything = "\n".join(contents.values())
    assert "&lt;script&gt;alert" in everything  # shown, as text
    assert "&lt;img src=x onerror=alert(6)&gt;" in everything
    assert "onmouseover=alert(2)" in everything and 'onmouseover="alert' not in everything


@pytest.mark.parametrize("html,found", [
    ("<p>ok</p><a href='https://x.org'>x</a><img src='../a.svg'>", []),
    ("<script>x</script>", ["<script>"]),
    ("<p onclick='x'>", ["<p onclick=…>"]),
    ("<a href=' javascript:alert(1)'>", ["<a href=' javascript:alert(1)'>"]),
    ("<a href='JaVaScRiPt:x'>", ["<a href='JaVaScRiPt:x'>"]),
    ("<iframe src='https://x.org'></iframe>", ["<iframe>"]),
    ("<img src='data:text/html;base64,xx'>", ["<img src='data:text/html;base64,xx'>"]),
])
def test_the_last_wall_finds_active_content(html, found):
    assert active_content(html) == found


def test_escaping_helpers():
    assert text("vasp-02") == "vasp-02"
    assert text("<b>") == "&lt;b&gt;"
    assert text("{: x }") == "\\{: x \\}"
    assert fence_for("x\n````\ny") == "`````"
    assert "javascript" not in prose_inline("[x](javascript:alert(1))")
    assert "|" not in prose_inline("a | b")


PAGE_EXTENSIONS = ["admonition", "attr_list", "md_in_html", "tables", "pymdownx.details", "pymdownx.tabbed",
                   "pymdownx.superfences"]  # mkdocs.yml's, the ones that turn text into markup
TEXT_FIELDS = [("cluster", "description"), ("tiers", 0, "description"), ("troubleshooting", 0, "symptom"),
               ("troubleshooting", 0, "cause"), ("decisions", 0, "title"), ("decisions", 0, "context"),
               ("router", "rules", 0, "why"), ("slurm_site", "qos", 0, "used_by")]


def _set(data, path, value):
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(TEXT_FIELDS),
       value=st.text(alphabet=st.sampled_from(list("<>[](){}:=`'\"!#*_|&/ \\jsavcriptonlde()1\n")), min_size=1,
                     max_size=60))
def test_any_text_value_renders_to_pages_with_nothing_active(field, value):
    data = copy.deepcopy(BEEFCAKE2_DATA)  # parsed once: 60 pure-Python parses were half this test's time
    _set(data, field, value if field[-1] in PROSE_FIELDS else " ".join(value.split()) or "x")
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError:
        return  # refused by the schema: never rendered
    for section in (pages.troubleshooting, pages.decisions, pages.router, pages.preemption, pages.tier_flags,
                    pages.api):
        html = markdown.markdown(section(cluster), extensions=PAGE_EXTENSIONS)
        assert active_content(html) == [], (section.__name__, value)
        assert "<script" not in html and "<img" not in html, (section.__name__, value)


def test_prose_is_escaped_exactly_once():
    """Raw HTML in prose is text; a code span's content is escaped by Markdown alone (issue 47: `invoke stop.<tier>`
    showed as stop.&lt;tier&gt;); a payload inside a code span stays text too."""
    from clusterbook.pure.mdtext import prose_html
    out = prose_html("Run `invoke stop.<tier>` & <b>x</b>, ``a ` b`` and `<img src=x onerror=alert(1)>`")
    assert "<code>invoke stop.&lt;tier&gt;</code>" in out and " &amp; &lt;b&gt;x&lt;/b&gt;" in out, out
    assert "<code>a ` b</code>" in out and "<code>&lt;img src=x onerror=alert(1)&gt;</code>" in out, out
    assert "&amp;lt;" not in out and active_content(out) == []
