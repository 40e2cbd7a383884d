"""Pictures for the docs site, drawn as SVG text at build time (matplotlib, no fonts or scripts from outside):
per node, one panel per device with a stacked bar for each set of tiers that can hold it at once."""

from __future__ import annotations

import io

from clusterbook.pure.planner.residency import ClusterPlan, SlotLoad

PARTS = (("weights", "#4c72b0"), ("kv", "#55a868"), ("compute", "#c44e52"), ("overhead", "#8172b2"))
LABELS = {"weights": "weights", "kv": "KV cache", "compute": "compute", "overhead": "overhead"}
GIB = 2**30


def _panel(ax, options: list[SlotLoad]) -> None:
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
    ax.set_yticks(range(len(options)), [" + ".join(f"{s.tier} ({s.what})" for s in x.shares) for x in options],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_title(f"{slot.device}" + (f" ({slot.model})" if slot.model else "")
                 + f": {slot.capacity / GIB:.1f} GiB usable (dashed)", fontsize=9, loc="left")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("GiB", fontsize=8)


def _node(node: str, devices: list[list[SlotLoad]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    plt.rcParams["svg.hashsalt"] = "clusterbook"  # the same input draws the same file
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: readable and searchable
    heights = [0.5 * len(options) + 0.9 for options in devices]
    fig = Figure(figsize=(8, sum(heights) + 0.6))
    axes = fig.subplots(len(devices), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, options in zip(axes, devices):
        _panel(ax, options)
    fig.legend(handles=[Patch(color=c, label=LABELS[p]) for p, c in PARTS], loc="lower center", ncols=4,
               fontsize=8, frameon=False)
    fig.suptitle(f"{node}: what each device holds at once", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return out.getvalue()


def node_pictures(cplan: ClusterPlan) -> dict[str, str]:
    """node -> SVG of its devices (GPUs, and RAM where CPU devices or mlock keep something)."""
    nodes: dict[str, list[list[SlotLoad]]] = {}
    for (node, _device), options in cplan.alternatives.items():
        nodes.setdefault(node, []).append(options)
    return {node: _node(node, devices) for node, devices in nodes.items()}
