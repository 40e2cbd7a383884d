"""Cold and warm deploy times on the lab: from a freshly booted lab, then the converged re-run; and a no-op
`invoke deploy.reasoning` as a whole process (median of 5), in this checkout or another one (--noop DIR,
e.g. a worktree of an older commit, to compare side by side on the same lab).

Run as root from the project root: .venv/bin/python benchmarks/deploy_times.py [--noop DIR ...]
Prints the figures and their ratio, and writes benchmarks/results/deploy-times.json.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ["deploy.install", "models.fetch", "deploy.router", "deploy.reasoning", "deploy.fast"]


def invoke(*args: str, root: Path = ROOT) -> float:
    env = {**os.environ, "INVOKE_CLUSTERBOOK_CLUSTER": "lab/cluster.yaml"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"invoke {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    return time.monotonic() - started


def noop(root: Path, runs: int = 5) -> list[float]:
    """A converged `invoke deploy.reasoning`, start to exit, in the checkout at root."""
    invoke("deploy.reasoning", root=root)  # converge first
    return sorted(invoke("deploy.reasoning", root=root) for _ in range(runs))


def main() -> None:
    if sys.argv[1:2] == ["--noop"]:
        for root in [Path(p).resolve() for p in sys.argv[2:]] or [ROOT]:
            times = noop(root)
            print(f"no-op deploy.reasoning in {root}: median {times[len(times) // 2]:.2f} s "
                  f"(range {times[0]:.2f}-{times[-1]:.2f}, {len(times)} runs)")
        return
    invoke("lab.down")
    boot = invoke("lab.up")
    cold = invoke(*DEPLOY)
    warm = [invoke(*DEPLOY) for _ in range(3)]
    result = {"lab_up_s": round(boot, 1), "cold_deploy_s": round(cold, 1), "warm_deploy_s": [round(w, 2) for w in warm],
              "cold_over_warm": round(cold / min(warm), 1), "machine": f"{os.cpu_count()} cores",
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"lab.up (root file system and build cached): {boot:.1f} s")
    print(f"cold deploy (install, models, router, reasoning, fast): {cold:.1f} s")
    print(f"warm deploy (nothing changes), 3 runs: {', '.join(f'{w:.2f}' for w in warm)} s")
    print(f"cold / warm: {cold / min(warm):.1f}x")
    out = ROOT / "benchmarks/results/deploy-times.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
