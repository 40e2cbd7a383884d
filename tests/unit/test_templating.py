"""Command templates: a text with no Jinja markup renders as Jinja renders it, without being compiled."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clusterbook.model import templating
from clusterbook.model.templating import MARKUP, render_string

TEXT = st.text(alphabet=st.sampled_from(list("ab {}%#!-\r\n\t'\"$")), max_size=40)


@settings(max_examples=500, deadline=None)
@given(TEXT)
def test_a_text_without_markup_renders_as_jinja_renders_it(text):
    if any(m in text for m in MARKUP):
        return
    assert render_string(text) == templating._env().from_string(text).render()


def test_plain_lines_are_not_compiled_and_markup_is():
    templating._template.cache_clear()
    assert render_string("systemctl daemon-reload\n") == "systemctl daemon-reload"
    assert templating._template.cache_info().currsize == 0
    assert render_string("echo {{ x }} {#! note !#}", x="a") == "echo a "
    assert templating._template.cache_info().currsize == 1
