#!/bin/bash
# Issue 46 at full size: beefcake2's reasoning tier (the 72B-shaped Q4_K_M model, the file's command lines and
# patch series) with clients through the gateway's hold while a worker is killed and the job script's restart
# brings the tier back. Two calls, each within the device's 10 minutes:
#   faults_full_size.sh prepare   llama.cpp built as full_size.sh builds it, the model written beside it
#   faults_full_size.sh run       full_size.py's "faults" configuration: no prompt filling the context, a crash,
#                                 4 clients (every second one streaming 200 tokens); results in $OUT
#                                 ($CONFIGS: other configurations of full_size.py)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=benchmarks/device/full_size_prelude.sh
source benchmarks/device/full_size_prelude.sh
case "$1" in
prepare)
    nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
    bash benchmarks/device/build_patched.sh > /tmp/build.log 2>&1 &
    build=$!
    start=$(date +%s)
    python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/OR1-Behemoth.Q4_K_M.gguf" \
        | tee "$OUT/model.txt"
    echo "model: $(( $(date +%s) - start )) s" | tee -a "$OUT/model.txt"
    wait $build || { tail -30 /tmp/build.log; exit 1; }
    tail -n 1 /tmp/build.log | tee "$OUT/build.txt"
    ;;
run)
    python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
        --out "$OUT" --only "${CONFIGS:-faults=prompt:0;crash:1;clients:4}" 2>&1 | tee "$OUT/faults.log"
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
    ;;
esac
