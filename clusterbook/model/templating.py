"""Jinja for command templates in runbooks and troubleshooting entries: sandboxed (a cluster file's template
cannot reach Python internals), strict, shell-safe comment syntax."""

from __future__ import annotations

from functools import cache

import jinja2
import jinja2.sandbox
from jinja2 import nodes

# Shell uses ${#ARRAY[@]}: move Jinja's comment syntax out of its way. Every template of clusterbook uses these.
JINJA_OPTIONS = {"undefined": jinja2.StrictUndefined, "autoescape": False, "trim_blocks": True,
                 "lstrip_blocks": True, "comment_start_string": "{#!", "comment_end_string": "!#}"}


@cache
def _env(finalize=None) -> jinja2.Environment:
    """The sandbox; with finalize, every value an expression prints passes through it first (a page's escaping)."""
    env = jinja2.sandbox.SandboxedEnvironment(keep_trailing_newline=False, finalize=finalize, **JINJA_OPTIONS)
    env.globals["required"] = required
    return env


def required(value: object, message: str) -> object:
    """Template helper: a value that must be set, or a template error with the message."""
    if value in (None, ""):
        raise ValueError(message)
    return value


@cache
def _template(text: str, finalize=None) -> jinja2.Template:
    """A compiled template, once per text per process: a runbook step renders once for each of its hosts."""
    return _env(finalize).from_string(text)


MARKUP = ("{{", "{%", "{#!")  # what starts an expression, a statement and a comment in clusterbook's Jinja


def render_string(text: str, finalize=None, **context: object) -> str:
    """Render a template; a text with no markup is its own rendering, as Jinja would return it (line ends as \\n,
    one trailing newline dropped), without compiling it (a runbook's plain lines and titles). finalize: what every
    printed value passes through (mdtext.escape_value for prose bound for a page)."""
    if not any(m in text for m in MARKUP):
        plain = text.replace("\r\n", "\n").replace("\r", "\n")
        return plain.removesuffix("\n")
    return _template(text, finalize).render(**context)


# A cluster file's command template is a command line with values in it: bounded work by construction. Loops may
# not nest and run only over the cluster's own lists, numbers in the template stay small, no operator repeats a
# string, filters come from this list, and the output is capped.
ALLOWED_FILTERS = frozenset({"default", "d", "join", "length", "count", "lower", "upper", "first", "last", "map",
                             "select", "reject", "selectattr", "rejectattr", "list", "sort", "unique", "string",
                             "int", "trim", "min", "max", "dictsort", "items", "attr", "e", "escape"})
MAX_TEMPLATE_NODES = 2_000
MAX_TEMPLATE_DEPTH = 30
MAX_TEMPLATE_NUMBER = 10_000
MAX_OUTPUT = 100_000  # characters a command template may render to


def template_error(text: str) -> str | None:
    """Why a command template cannot be parsed, or does more work than a command line needs; else None."""
    try:
        tree = _env().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return f"template syntax error: {exc.message} (line {exc.lineno} of the template)"
    except RecursionError:
        return "template nests too deeply to parse"
    try:
        return _shape_error(tree)
    except RecursionError:
        return "template nests too deeply"


def _shape_error(tree: nodes.Node) -> str | None:
    count = 0

    def walk(node: nodes.Node, depth: int, in_loop: bool) -> str | None:
        nonlocal count
        count += 1
        if count > MAX_TEMPLATE_NODES:
            return f"template is longer than {MAX_TEMPLATE_NODES} parts: a command needs far fewer"
        if depth > MAX_TEMPLATE_DEPTH:
            return f"template nests deeper than {MAX_TEMPLATE_DEPTH} levels"
        if isinstance(node, nodes.For):
            if in_loop:
                return "loops may not nest in a command template"
            if not isinstance(node.iter, (nodes.Name, nodes.Getattr, nodes.Getitem)):
                return "a loop may only run over the cluster's own lists (e.g. cluster.nodes)"
        if isinstance(node, (nodes.Mul, nodes.Pow, nodes.FloorDiv, nodes.Mod)):
            return "arithmetic that repeats or grows values (*, **, //, %) is not allowed in a command template"
        if isinstance(node, (nodes.Macro, nodes.CallBlock, nodes.Call, nodes.Import, nodes.FromImport,
                             nodes.Include, nodes.Extends, nodes.Block, nodes.FilterBlock, nodes.With)):
            return f"{type(node).__name__.lower()} is not allowed in a command template"
        if isinstance(node, nodes.Filter) and node.name not in ALLOWED_FILTERS:
            return f"filter '{node.name}' is not allowed in a command template ({', '.join(sorted(ALLOWED_FILTERS))})"
        if isinstance(node, nodes.Const) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool) \
                and abs(node.value) > MAX_TEMPLATE_NUMBER:
            return f"number {node.value} is too large for a command template (at most {MAX_TEMPLATE_NUMBER:,})"
        loop = in_loop or isinstance(node, nodes.For)
        for child in node.iter_child_nodes():
            if error := walk(child, depth + 1, loop):
                return error
        return None

    return walk(tree, 0, False)


def render_command(text: str, **context: object) -> str:
    """Render a cluster file's command template (checked by template_error), its output capped at MAX_OUTPUT."""
    out: list[str] = []
    size = 0
    for chunk in _template(text).generate(**context):
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise ValueError(f"the command renders to more than {MAX_OUTPUT:,} characters")
        out.append(chunk)
    return "".join(out)
