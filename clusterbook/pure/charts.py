"""Pictures for the docs site, drawn as SVG text at build time (matplotlib, no fonts or scripts from outside):
per node, one panel per device with a stacked bar for each set of tiers that can hold it at once; and the
measured results beside the plan: decode speed per client count, the phases of each recovery, load times by card.
Each is drawn twice: wide for a screen, and narrow (`narrow=True`) for a phone, where the page shows the picture at
about its drawn width, so its 8-point text stays about 11 px tall instead of 5."""

from __future__ import annotations

import io
import textwrap

from clusterbook.pure.planner.residency import ClusterPlan, SlotLoad

PARTS = (("weights", "#4c72b0"), ("kv", "#55a868"), ("compute", "#c44e52"), ("overhead", "#8172b2"))
LABELS = {"weights": "weights", "kv": "KV cache", "compute": "compute", "overhead": "overhead"}
GIB = 2**30
NARROW_IN = 3.3  # inches: 238 points shown on about 343 px of a 390 px phone, so 8-point text is 11.5 px tall


def _wrap(label: str, narrow: bool, width: int = 24) -> str:
    return "\n".join(textwrap.wrap(label, width)) if narrow else label


def _panel(ax, options: list[SlotLoad], narrow: bool) -> None:
    """One device: a bar per alternative (the tiers resident together), stacked by part, tiers separated."""
    slot = options[0].slot
    for y, load in enumerate(options):
        left = 0.0
        for share in load.shares:
            for part, colour in PARTS:
                width = getattr(share, part) / GIB
                ax.barh(y, width, left=left, color=colour, height=0.6, edgecolor="white", linewidth=0.5)
                left += width
            ax.text(left, y, f" {share.tier}", va="center", fontsize=8)
    top = max(slot.capacity, *(x.total for x in options)) / GIB
    ax.axvline(slot.capacity / GIB, color="black", linestyle="--", linewidth=1.2)
    ax.set_xlim(0, top * 1.25)
    ax.set_yticks(range(len(options)), [_wrap(" + ".join(f"{s.tier} ({s.what})" for s in x.shares), narrow, 18)
                                        for x in options], fontsize=8)
    ax.invert_yaxis()
    ax.set_title(_wrap(f"{slot.device}" + (f" ({slot.model})" if slot.model else "")
                       + f": {slot.capacity / GIB:.1f} GiB usable (dashed)", narrow, 24), fontsize=9, loc="left")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("GiB", fontsize=8)


def _matplotlib():
    """matplotlib, imported on the first picture (0.6 s: only the docs build draws), set for stable SVG."""
    import matplotlib  # lazy: see the docstring
    from matplotlib import figure, patches, pyplot

    matplotlib.use("Agg")
    pyplot.rcParams["svg.hashsalt"] = "clusterbook"  # the same input draws the same file
    pyplot.rcParams["svg.fonttype"] = "none"  # text stays text: readable and searchable
    return figure.Figure, patches.Patch


def _node(node: str, devices: list[list[SlotLoad]], narrow: bool) -> str:
    Figure, Patch = _matplotlib()
    heights = [(0.8 if narrow else 0.5) * len(options) + (1.2 if narrow else 0.9) for options in devices]
    fig = Figure(figsize=(NARROW_IN if narrow else 8, sum(heights) + 0.6))
    axes = fig.subplots(len(devices), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, options in zip(axes, devices):
        _panel(ax, options, narrow)
    fig.legend(handles=[Patch(color=c, label=LABELS[p]) for p, c in PARTS], loc="lower center",
               ncols=2 if narrow else 4, fontsize=8, frameon=False)
    fig.suptitle(_wrap(f"{node}: what each device holds at once", narrow, 32), fontsize=10)
    fig.tight_layout(rect=(0, 0.1 if narrow else 0.05, 1, 1))
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return out.getvalue()


def node_pictures(cplan: ClusterPlan, narrow: bool = False) -> dict[str, str]:
    """node -> SVG of its devices (GPUs, and RAM where CPU devices or mlock keep something)."""
    nodes: dict[str, list[list[SlotLoad]]] = {}
    for (node, _device), options in cplan.alternatives.items():
        nodes.setdefault(node, []).append(options)
    return {node: _node(node, devices, narrow) for node, devices in nodes.items()}


def _figure(width: float, height: float):
    Figure, _ = _matplotlib()
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _svg(fig) -> str:
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return out.getvalue()


def concurrency_chart(points: list[dict], bound_tps: float | None, target_tps: float | None, title: str,
                      narrow: bool = False) -> str:
    """Decode speed per number of clients (aggregate and per client), beside the planner's bound for one stream
    and the tier's decode target."""
    fig, ax = _figure(NARROW_IN, 4.2) if narrow else _figure(7, 3.6)
    clients = [p["clients"] for p in points]
    ax.plot(clients, [p["aggregate_tps"] for p in points], marker="o", color="#4c72b0", label="all clients, tok/s")
    ax.plot(clients, [p["per_client_tps"] for p in points], marker="s", color="#55a868", label="per client, tok/s")
    if bound_tps:
        ax.axhline(bound_tps, color="black", linestyle="--", linewidth=1, label=f"planner bound, one stream "
                                                                                  f"({bound_tps:.1f})")
    if target_tps:
        ax.axhline(target_tps, color="#c44e52", linestyle=":", linewidth=1.5, label=f"target ({target_tps:g})")
    ax.set_xticks(clients)
    ax.set_xlabel("clients at once", fontsize=9)
    ax.set_ylabel("decode tok/s", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(_wrap(title, narrow, 34), fontsize=10, loc="left")
    return _svg(fig)


PHASE_COLOURS = {"head aborted": "#dd8452", "worker back": "#8172b2", "job left running": "#dd8452",
                 "head started": "#937860", "job running": "#937860", "loading": "#da8bc3",
                 "model loaded": "#55a868", "first answer": "#4c72b0"}


def recovery_chart(runs: list[dict], predicted_s: float, target_s: float | None, title: str,
                   narrow: bool = False) -> str:
    """One row per run: a mark for each phase, seconds after the disruption, beside the predicted recovery and
    the target (on a phone, the legend below)."""
    fig, ax = _figure(NARROW_IN, 0.6 * len(runs) + 3.6) if narrow else _figure(8, 0.45 * len(runs) + 1.6)
    seen = set()
    for y, run in enumerate(runs):
        phases = run.get("phases", {})
        if phases.get("first answer") is not None:
            ax.barh(y, phases["first answer"], color="#e0e0e0", height=0.5)
        for phase, seconds in sorted(phases.items(), key=lambda item: item[1]):
            label = phase if phase not in seen else None
            seen.add(phase)
            ax.plot(seconds, y, marker="|", markersize=14, mew=2.5, color=PHASE_COLOURS.get(phase, "black"),
                    linestyle="none", label=label)
    ax.axvline(predicted_s, color="black", linestyle="--", linewidth=1, label=f"predicted ({predicted_s:.0f} s)")
    if target_s:
        ax.axvline(target_s, color="#c44e52", linestyle=":", linewidth=1.5, label=f"target ({target_s:g} s)")
    ax.set_yticks(range(len(runs)), [_wrap(f"{r['case']}, cache {r['page_cache']}", narrow, 16) for r in runs],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds after the disruption", fontsize=9)
    if narrow:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncols=2, frameon=False)
    else:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title(_wrap(title, narrow, 34), fontsize=10, loc="left")
    return _svg(fig)


def load_time_chart(rows: list[dict], card: str, narrow: bool = False) -> str:
    """Load time of each model size on one GPU and split 1:1 over RPC (the runs of a benchmark), by card."""
    fig, ax = _figure(NARROW_IN, 3.8) if narrow else _figure(7, 3.2)
    sizes = sorted({r["bytes"] for r in rows})
    for offset, (key, label, colour) in enumerate((("one_gpu_s", "one GPU", "#4c72b0"),
                                                   ("split_s", "split 1:1 over RPC", "#c44e52"))):
        for i, size in enumerate(sizes):
            values = [r[key] for r in rows if r["bytes"] == size]
            ax.bar([i * 3 + offset + 0.2 * k for k in range(len(values))], values, width=0.2, color=colour,
                   label=label if i == 0 else None)
    ax.set_xticks([i * 3 + 0.6 for i in range(len(sizes))], [_wrap(f"{s / 1e9:.2f} GB model", narrow, 8)
                                                              for s in sizes], fontsize=8)
    ax.set_ylabel("seconds to /health 200", fontsize=9)
    ax.legend(fontsize=8)
    ax.set_title(_wrap(f"Load time, {card}", narrow, 34), fontsize=10, loc="left")
    return _svg(fig)
