"""Jinja for command templates in runbooks and troubleshooting entries: sandboxed (a cluster file's template
cannot reach Python internals), strict, shell-safe comment syntax."""

from __future__ import annotations

from functools import cache

import jinja2
import jinja2.sandbox

# Shell uses ${#ARRAY[@]}: move Jinja's comment syntax out of its way. Every template of clusterbook uses these.
JINJA_OPTIONS = {"undefined": jinja2.StrictUndefined, "autoescape": False, "trim_blocks": True,
                 "lstrip_blocks": True, "comment_start_string": "{#!", "comment_end_string": "!#}"}


@cache
def _env() -> jinja2.Environment:
    env = jinja2.sandbox.SandboxedEnvironment(keep_trailing_newline=False, **JINJA_OPTIONS)
    env.globals["required"] = required
    return env


def required(value: object, message: str) -> object:
    """Template helper: a value that must be set, or a template error with the message."""
    if value in (None, ""):
        raise ValueError(message)
    return value


def render_string(text: str, **context: object) -> str:
    return _env().from_string(text).render(**context)


def template_error(text: str) -> str | None:
    """Why a command template cannot be parsed, or None."""
    try:
        _env().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return f"template syntax error: {exc.message} (line {exc.lineno} of the template)"
    return None
