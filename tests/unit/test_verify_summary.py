"""The verify summary: counts first, failures on top, and measured values or messages that stay text."""

import markdown

from clusterbook.pure.mdtext import active_content
from clusterbook.pure.verifysummary import summary_markdown

HOSTILE = [
    {"feature": "Router", "scenario": "Every model answers", "outcome": "passed",
     "measurements": {"answered": {"lab-fast-a": "0", "lab-fast-b": "1"}}},
    {"feature": "GPUs", "scenario": "GPU memory", "outcome": "skipped", "measurements": {},
     "message": "no GPU on lab1 | <script>alert(1)</script> {: onclick=x }"},
    {"feature": "Resilience", "scenario": "A killed worker", "outcome": "failed",
     "measurements": {"back after (s)": 3.5}, "message": "expected ≤ 2 s | took *3.5* s"},
]


def render(text: str) -> str:
    return markdown.markdown(text, extensions=["tables", "attr_list", "md_in_html"])


def test_the_counts_come_first_and_failures_lead_the_table():
    text = summary_markdown("lab", "lab/cluster.yaml", "11434", "2026-11-27 05:00 UTC", HOSTILE)
    first = text.splitlines()[0]
    assert first.endswith("**❌ 1 failed, ⏭️ 1 skipped, ✅ 1 passed**."), first
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[2] for row in rows] == ["❌ failed", "⏭️ skipped", "✅ passed"]


def test_measured_values_and_messages_stay_text_in_their_own_cells():
    page = render(summary_markdown("lab", "lab/cluster.yaml", "11434", "now", HOSTILE))
    assert active_content(page) == []
    assert "<script" not in page and "onclick" not in page.replace("onclick=x", "")  # only as shown text
    for row in page.split("<tr>")[2:]:
        assert row.count("<td") == 5, row  # a | in a value never adds a column
    assert "{'lab-fast-a': '0', 'lab-fast-b': '1'}" in page.replace("&#x27;", "'")  # not eaten by attr_list
    assert "<em>" not in page  # *3.5* is not emphasis


def test_an_empty_run_says_so():
    assert "**no scenario ran**" in summary_markdown("lab", "f.yaml", "1", "now", [])
