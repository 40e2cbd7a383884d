"""The verify run's summary as Markdown: the counts first, failures at the top, every cell shown as text."""

from __future__ import annotations

from clusterbook.pure.mdtext import text

OUTCOME_MARK = {"failed": "❌ ", "passed": "✅ ", "skipped": "⏭️ ", "waiting": "⏳ "}  # icon and word, not colour only
ORDER = ["failed", "not run", "waiting", "skipped", "passed"]  # waiting: its tier's job waits for nodes other jobs hold


def only_waiting(results: list[dict]) -> bool:
    """Whether every scenario that did not pass failed only because its tier waits for nodes (VASP's)."""
    left = [e for e in results if "scenario" in e and e.get("outcome") not in ("passed", "skipped")]
    return bool(left) and all(e.get("outcome") == "waiting" for e in left)


def _rank(outcome: str) -> int:
    return ORDER.index(outcome) if outcome in ORDER else 0


def summary_markdown(cluster_name: str, cluster_file: str, build: str, when: str, results: list[dict]) -> str:
    """One row per scenario (feature, scenario, outcome, measurements, the failure's or skip's message); a
    measured {'a': 1}, a | or a <script> in a message stays text: no Markdown, HTML or attr_list starts in a cell."""
    entries = sorted((e for e in results if "scenario" in e), key=lambda e: _rank(e.get("outcome", "not run")))
    rows, counts = [], {}
    for entry in entries:
        outcome = entry.get("outcome", "not run")
        counts[outcome] = counts.get(outcome, 0) + 1
        figures = text("; ".join(f"{k}: {v}" for k, v in entry.get("measurements", {}).items())) or "–"
        note = text((entry.get("message") or "")[:300])
        rows.append(f"| {text(entry.get('feature', ''))} | {text(entry['scenario'])} | "
                    f"{OUTCOME_MARK.get(outcome, '')}{outcome} | {figures} | {note} |")
    summary = ", ".join(f"{OUTCOME_MARK.get(k, '')}{n} {k}" for k, n in sorted(counts.items(),
                                                                                key=lambda kv: _rank(kv[0])))
    head = (f"Verified **{text(cluster_name)}** (`{cluster_file}`) on {when}, llama.cpp build b{build}: "
            f"**{summary or 'no scenario ran'}**.")
    return "\n".join([head, "", "| feature | scenario | result | measured | note |", "|---|---|---|---|---|",
                      *rows]) + "\n"
