"""A cut stream continued by the gateway's hold through a real llama-server with real chat templates (issue 46): on
the lab's reasoning head, llama-server (the lab's build) serves the lab's model with each template of llama.cpp's own
source (models/templates/, the pinned build's) behind hold.py; it is killed while the stream is in flight and
started again. Per template: did the client's stream go on (status, [DONE], no error event), in which field
(a thinking model's reasoning_content or the answer), and did the continuation carry the text already sent (the
continuation's prompt, in tokens, beside the first request's).

    .venv/bin/python benchmarks/continue_templates.py [--cluster lab/cluster.yaml] [--kill-after 2.0]
        [--template Qwen-Qwen3-0.6B.jinja ...] [--out benchmarks/results/lab-continuation.json]
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.effects.connections import connect  # noqa: E402
from clusterbook.model.loader import load_cluster  # noqa: E402
from clusterbook.pure.engine_build import plan_build  # noqa: E402

TEMPLATES = ("Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja")  # Qwen3's (OR1-Behemoth is Qwen3-based), and one whose
# generation prompt opens the thinking (a random-weights model never writes <think> itself)
FOLDER = "/tmp/clusterbook-continue-probe"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default="lab/cluster.yaml")
    parser.add_argument("--kill-after", type=float, default=2.0)
    parser.add_argument("--template", action="append")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/lab-continuation.json"))
    args = parser.parse_args()
    c = load_cluster(args.cluster)
    if not c.cluster.name.startswith("lab"):
        sys.exit(f"{args.cluster}: a lab's file only (this kills llama-server processes it starts on a node)")
    tier = next(t for t in c.tiers if getattr(t, "head", None))
    model = next(m for m in c.models if m.id == tier.model)
    transport = connect(c)
    for name, mode in (("hold.py", 0o644), ("continue_probe.py", 0o755)):
        source = ROOT / ("clusterbook/node" if name == "hold.py" else "benchmarks/lab") / name
        transport.put(tier.head, f"{FOLDER}/{name}", source.read_bytes(), mode)
    templates = posixpath.join(plan_build(c).root, "src/models/templates")
    binary = posixpath.join(c.engine.install_dir, c.engine.server_binary)
    results = []
    for template in args.template or TEMPLATES:
        command = (f"python3 {FOLDER}/continue_probe.py {binary} {posixpath.join(c.storage.models_dir, model.file)} "
                   f"{templates}/{template} {args.kill_after}")
        result = transport.run(tier.head, command, timeout=300)
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
        if not result.ok or not lines:
            sys.exit(f"{tier.head}: `{command}` exited {result.returncode}: {result.tail()}")
        found = {"template": template, **json.loads(lines[-1])}
        results.append(found)
        resumed = any("resumed" in comment for comment in found["comments"])
        print(f"{template}: status {found['status']}, {'resumed' if resumed else 'NOT cut'}, reasoning "
              f"{found['reasoning_chars']} chars, answer {found['answer_chars']} chars, error events "
              f"{len(found['error_events'])}, [DONE] {found['done']}, prompt tokens {found['first_prompt_tokens']} "
              f"first, {found['continuation_prompt_tokens']} continued")
    Path(args.out).write_text(json.dumps({"cluster": c.cluster.name, "kill_after_s": args.kill_after,
                                          "runs": results}, indent=1) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
