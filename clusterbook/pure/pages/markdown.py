"""Markdown building blocks of the generated pages: tables, code, pictures, tabs, figures."""

from __future__ import annotations

from clusterbook.pure.mdtext import fence_for, text
from clusterbook.pure.planner.capacity import GIB

METRICS = {"decode_tps": ("decode throughput", "tok/s"), "ttft_s": ("time to first token", "s"),
           "gpu_util_pct": ("GPU utilisation", "%"), "gpu_mem_gib": ("memory per GPU", "GiB"),
           "fabric_gbps": ("fabric bandwidth", "Gbit/s"), "recovery_s": ("recovery after a worker crash", "s"),
           "api_response_s": ("API answers within", "s")}


def last_changed(sources: list[str], history: dict[str, tuple[int, str]], shown: int = 3) -> str:
    """A page's closing line: when the files it is made from last changed (git), the newest first."""
    known = sorted((history[s][0], s, history[s][1]) for s in sources if s in history)
    if not known:
        return ""
    more = f"; and {len(known) - shown} more" if len(known) > shown else ""
    return ("\n\n---\n\n*Last changed: " + "; ".join(f"{text(source)} {text(when)}" for _, source, when
                                                     in known[:shown]) + more + ".*\n")


def picture_file(name: str, narrow: bool = False) -> str:
    """The file of a generated chart: drawn wide, or narrow for a phone."""
    return f"{name}-narrow.svg" if narrow else f"{name}.svg"


def picture(caption: str, name: str) -> str:
    """A generated chart, drawn twice: the stylesheet (docs/assets/clusterbook.css) shows the wide drawing on a
    screen and the narrow one on a phone, where its text stays readable; each opens on its own when tapped, to
    zoom."""
    return " ".join(f"[![{text(caption)}]({picture_file(name, narrow)}){{ .{css} }}]({picture_file(name, narrow)} "
                    '"Open the picture on its own, to zoom")' for narrow, css in ((False, "cb-wide"),
                                                                                   (True, "cb-narrow")))


def table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "bash") -> str:
    fence = fence_for(text)  # longer than any fence inside: the content cannot close it
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"


def gib(n: int | None) -> str:
    if n is None:
        return "–"
    return f"{n / GIB:.2f} GiB" if abs(n) >= 0.1 * GIB else f"{n / 2**20:.1f} MiB"


def tabs(named: dict[str, str]) -> str:
    """Content tabs (pymdownx.tabbed): each body indented under its title."""
    out = []
    for name, body in named.items():
        indented = "\n".join(("    " + line) if line else "" for line in body.rstrip().splitlines())
        out.append(f'=== "{name}"\n\n{indented}\n')
    return "\n".join(out)


def slot_context(tier) -> str:
    """The context one request gets: llama-server gives each of its --parallel slots ctx_size / parallel."""
    if tier.parallel == 1:
        return f"{tier.ctx_size:,}"
    return f"{tier.ctx_size // tier.parallel:,} per request ({tier.parallel} slots share {tier.ctx_size:,})"


def slug(runbook_id: str, tier: str | None) -> str:
    return f"{runbook_id}-{tier}" if tier else runbook_id

