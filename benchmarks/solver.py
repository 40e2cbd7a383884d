"""How long the placement solver and the residency plan take: beefcake2 (3 GPUs, 2 tiers), the seeds' placement of
beefcake2, a synthetic cluster of 16 single-GPU nodes with 11 tiers (6 router, 5 RPC over two GPUs each) whose
written placement puts two router tiers on one GPU, and the same 16 nodes with 4 GPUs each (64) and 12 tiers (6 RPC
over two nodes, 8 GPUs each). Prints seconds (median of 3) and what the solver found.

    .venv/bin/python benchmarks/solver.py
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.model.schema import Cluster  # noqa: E402
from clusterbook.pure.planner import solver  # noqa: E402
from clusterbook.pure.planner.capacity import plan_cluster  # noqa: E402
from clusterbook.pure.planner.residency import plan_residency  # noqa: E402
from tests.conftest import seeds_placement  # noqa: E402


def synthetic(nodes: int = 16, routers: int = 6, rpcs: int = 5, gpus: int = 1) -> Cluster:
    """beefcake2's hardware sixteen times over (each node with `gpus` V100S), with routers + rpcs tiers; the last
    router tier shares the first one's node."""
    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    template = next(n for n in data["nodes"] if n["name"] == "vasp-01")
    template["gpus"] = template["gpus"] * gpus
    data["nodes"] = [n for n in data["nodes"] if n["name"] == "slurm-ctl"]
    for i in range(1, nodes + 1):
        node = copy.deepcopy(template)
        node.update(name=f"gpu-{i:02d}", hostname=f"gpu-{i:02d}", jump=None)
        node["addresses"] = {net: f"{addr.rsplit('.', 1)[0]}.{100 + i}" for net, addr in node["addresses"].items()}
        data["nodes"].append(node)
    fast = next(t for t in data["tiers"] if t["name"] == "fast")
    reasoning = next(t for t in data["tiers"] if t["name"] == "reasoning")
    tiers = []
    for i in range(routers):
        node = f"gpu-{i + 1:02d}" if i < routers - 1 else "gpu-01"  # the written placement's mistake
        tiers.append({**copy.deepcopy(fast), "name": f"fast-{i}", "node": node, "port": 8100 + i})
    for i in range(rpcs):
        head, worker = (f"gpu-{(routers + 2 * i + k) % nodes + 1:02d}" for k in (0, 1))
        share = 40 if gpus == 1 else [40] * gpus
        tiers.append({**copy.deepcopy(reasoning), "name": f"deep-{i}", "head": head, "workers": [worker],
                      "tensor_split": {head: share, worker: share}, "port": 8200 + i, "rpc_port": 50100 + i})
    data["tiers"] = tiers
    for section in ("router", "gateway", "targets", "troubleshooting", "monitoring"):
        data.pop(section, None)
    data["decisions"] = []
    return Cluster.model_validate(data)


def seconds(fn) -> float:
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    beefcake2 = Cluster.model_validate(yaml.safe_load((ROOT / "cluster.yaml").read_text()))
    seeds = Cluster.model_validate(yaml.safe_load(seeds_placement((ROOT / "cluster.yaml").read_text())))
    for name, c in (("beefcake2", beefcake2), ("beefcake2, the seeds' placement", seeds),
                    ("16 single-GPU nodes, 11 tiers", synthetic()),
                    ("16 nodes of 4 GPUs (64), 12 tiers", synthetic(routers=6, rpcs=6, gpus=4))):
        plans = plan_cluster(c)
        residency = seconds(lambda c=c, plans=plans: plan_residency(c, plans))
        solving = seconds(lambda c=c: solver.solve(c))
        found = solver.solve(c)[0]
        print(f"{name}: residency plan {residency:.3f} s, solve {solving:.2f} s; best: "
              f"{'serves at once' if found.serving_together else 'one waits'}, "
              f"{'fits' if found.feasible else 'does not fit'}, {len(found.changes)} tier(s) moved")


if __name__ == "__main__":
    main()
