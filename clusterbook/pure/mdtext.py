"""Values from the cluster file as Markdown that shows them as text: escaped words, sanitized prose, fences the
content cannot close, and a last look at the HTML for anything active."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import markdown
import nh3


class Markdown(str):
    """Markdown that clusterbook built itself, every cluster value in it already passed through this module: the
    docs' macros hand it on as it is (any other string is escaped, see `escape_value`)."""


# Characters that never mean anything to Markdown, HTML or attr_list: a value made of them alone is left as it is.
PLAIN = re.compile(r"[A-Za-z0-9 ,/:@%=+-]*")
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>])")  # what Python-Markdown unescapes


def text(value: object) -> str:
    """One value shown as text in running Markdown (a paragraph, a heading, a table cell): HTML's &, <, > as
    entities, Markdown's punctuation backslash-escaped (no emphasis, link, attribute list or table column can
    start inside it), line breaks as spaces."""
    s = str(value)
    if PLAIN.fullmatch(s):
        return s
    return _escape_markdown(html.escape(s.replace("\r", " ").replace("\n", " "), quote=True))


# What a value may hold and still stand in a runbook's prose as it is, in running text or in a code span: nothing
# in it opens a link, an image, code, HTML or an attribute list. Anything else is escaped as text (a code span
# then shows the backslashes: better than a value that becomes markup).
SAFE_IN_PROSE = re.compile(r"[A-Za-z0-9 ,/:@%=+._~-]*")


def nav_title(value: object) -> str:
    """A title for a page's <title> and the navigation: the theme puts both in the page raw, after unescaping
    entities (striptags), so no escaping survives: HTML's <, > and & become look-alikes that mean nothing."""
    return " ".join(str(value).translate({ord("<"): "‹", ord(">"): "›", ord("&"): "＆"}).split())


def prose_value(value: object) -> object:
    """The finalize of a runbook's titles and explanations bound for a page (runbooks.expand): a value stays as it
    is where that cannot change the page, else it is text."""
    if value is None or isinstance(value, (bool, int, float, Markdown)):
        return value
    return value if isinstance(value, str) and SAFE_IN_PROSE.fullmatch(value) else text(value)


def _escape_markdown(escaped_html: str) -> str:
    """Backslash-escape Markdown punctuation outside the entities html.escape wrote."""
    parts = re.split(r"(&(?:amp|lt|gt|quot|#x27);)", escaped_html)
    return "".join(part if i % 2 else MARKDOWN_SPECIAL.sub(r"\\\1", part) for i, part in enumerate(parts))


def code(value: object) -> str:
    """One value as an inline code span that shows it exactly: Markdown escapes a code span's content itself and
    shows backslashes, so the value goes in as it is, between more backticks than any run inside it."""
    s = " ".join(str(value).split())
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def escape_value(value: object) -> object:
    """The docs' Jinja finalize: a string from the cluster reaches the page as text; clusterbook's own Markdown
    (the macros' sections) and numbers pass as they are."""
    if value is None or isinstance(value, (bool, int, float, Markdown)):
        return value
    return text(value) if isinstance(value, str) else value


def title(value: object) -> str:
    """A value inside an admonition's quoted title (Python-Markdown sets it as text: only the quote must go)."""
    return " ".join(str(value).replace('"', "'").split())


def mermaid_text(value: object) -> str:
    """A value inside a quoted Mermaid label: Mermaid's own entity codes for what would end the label or open a
    tag (Mermaid then shows the character as text)."""
    out = " ".join(str(value).split())
    for char, code in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("`", "#96;"), ("&", "#38;"),
                       ("[", "#91;"), ("]", "#93;"), ("|", "#124;"), ("{", "#123;"), ("}", "#125;")):
        out = out.replace(char, code) if char != "#" else out.replace("#", "\0")
    return out.replace("\0", "#35;")


def fence_for(content: str) -> str:
    """A code fence longer than any run of backticks at the start of a line of the content (at least three)."""
    runs = [len(m.group(1)) for m in re.finditer(r"^[ \t]*(`{3,}|~{3,})", content, re.MULTILINE)]
    return "`" * max(3, max(runs, default=0) + 1)


def demoted(markdown: str) -> str:
    """The Markdown with every heading one level lower (# becomes ##), outside code fences, so a page can be one
    section of another."""
    out, fence = [], None
    for line in markdown.split("\n"):
        opener = re.match(r"^[ \t]*(`{3,}|~{3,})", line)
        if fence is None and opener:
            fence = opener.group(1)
        elif fence is not None and opener and opener.group(1).startswith(fence) and not line.strip()[len(fence):]:
            fence = None
        elif fence is None and re.match(r"^#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out)


# What prose may become: the HTML of ordinary Markdown (paragraphs, emphasis, lists, code, links to the web).
PROSE_TAGS = {"p", "em", "strong", "code", "pre", "ul", "ol", "li", "a", "br", "blockquote", "h4", "h5", "h6"}
PROSE_SCHEMES = {"http", "https", "mailto"}


CODE_SPAN = re.compile(r"(?<!\\)(`+)(.+?)(?<!`)\1(?!`)")  # Python-Markdown's inline code span, on one line


def _escape_outside_code_spans(source: str) -> str:
    """HTML-escape prose except inside its code spans, which Markdown escapes itself (escaped here too, `<tier>`
    showed as &lt;tier&gt;)."""
    out, last = [], 0
    for span in CODE_SPAN.finditer(source):
        out += [html.escape(source[last:span.start()], quote=False), span.group(0)]
        last = span.end()
    return "".join(out) + html.escape(source[last:], quote=False)


def prose_html(value: object) -> str:
    """Prose from the cluster file (it may carry Markdown) as sanitized HTML: raw HTML shown as text, attribute
    lists not parsed, links only to http(s) and mail, nothing else kept (nh3, the Rust ammonia sanitizer)."""
    source = _escape_outside_code_spans(str(value))  # raw HTML in prose is text, never markup
    rendered = markdown.markdown(source, extensions=[], output_format="html")
    return nh3.clean(rendered, tags=PROSE_TAGS, attributes={"a": {"href", "title"}}, url_schemes=PROSE_SCHEMES,
                     link_rel="noopener noreferrer nofollow")


def prose(value: object) -> str:
    """Prose as a block of the page: its sanitized HTML, which Markdown passes through as it is."""
    body = prose_html(value)
    return f'<div class="cb-prose">\n{body}\n</div>\n' if body else ""


def prose_inline(value: object) -> str:
    """Prose inside a table cell or a sentence: its sanitized HTML on one line, paragraphs joined by <br>, no
    column separator."""
    body = prose_html(value).replace("</p>\n<p>", "<br>").removeprefix("<p>").removesuffix("</p>")
    return body.replace("\n", " ").replace("|", "&#124;")


# --- the last wall: nothing active may reach a page --------------------------------------------------------
ACTIVE_TAGS = {"script", "iframe", "object", "embed", "applet", "base", "form", "meta", "link", "frame", "frameset",
               "style", "template", "portal"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "poster", "background", "srcset"}
SAFE_URL = re.compile(r"(https?:|mailto:|#|\.{0,2}/|[A-Za-z0-9_.~-]+(/|\.|#|$)|$)", re.IGNORECASE)


class _ActiveFinder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ACTIVE_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=…>")
            elif name in URL_ATTRIBUTES and value is not None:
                url = "".join(value.split())
                if not SAFE_URL.match(url) and not url.startswith("data:image/svg+xml"):
                    self.found.append(f"<{tag} {name}={value[:40]!r}>")
            elif name == "style" and value and re.search(r"url\(|expression\(|javascript:", value, re.IGNORECASE):
                self.found.append(f"<{tag} style={value[:40]!r}>")


def active_content(page_html: str) -> list[str]:
    """Elements and attributes in a page's content that would run or load something: scripts, frames, event
    handlers, javascript:/data: links. The docs build fails on any (a value that got past the escaping)."""
    finder = _ActiveFinder()
    finder.feed(page_html)
    finder.close()
    return finder.found
