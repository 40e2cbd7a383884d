#!/bin/bash
# Issue 66 row 6: beefcake2's reasoning tier at full size at every context its plan offers (the file's and the
# largest that fits), each GPU held to a V100S: the peak through a prompt that fills the context beside the plan.
# After `faults_full_size.sh prepare` on the same machine (llama.cpp built, the 72B-shaped model written):
#   contexts.sh    the plan's largest context from the model's GGUF header (as full_size.py plans it), then
#                  full_size.py at the file's context and at that one; results in $OUT
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=benchmarks/device/full_size_prelude.sh
source benchmarks/device/full_size_prelude.sh
largest=$(python3 - "$M/OR1-Behemoth.Q4_K_M.gguf" <<'PY'
import sys
from pathlib import Path
from clusterbook.model.loader import load_cluster
from clusterbook.pure.planner.capacity import largest_context
from clusterbook.pure.planner.shape import from_gguf
c = load_cluster(Path("cluster.yaml"))
print(largest_context(c, c.tier("reasoning"), from_gguf(Path(sys.argv[1]))))
PY
)
file=$(python3 -c "from pathlib import Path; from clusterbook.model.loader import load_cluster; \
print(load_cluster(Path('cluster.yaml')).tier('reasoning').ctx_size)")
echo "the file's context: $file; the largest the plan offers: $largest" | tee "$OUT/contexts.txt"
python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
    --out "$OUT" --only "ctx$file=ctx_size:$file,ctx$largest=ctx_size:$largest" 2>&1 | tee "$OUT/contexts.log"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
