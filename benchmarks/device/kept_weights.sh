#!/bin/bash
# Issue 48 at full size: a split tier's head restarted while its worker keeps the weights (patches/
# rpc-keep-weights.patch) against the same restart with the worker told to keep nothing (keep_weights_s 0), beside
# the whole model loaded on one GPU. beefcake2's reasoning tier (the 72B-shaped Q4_K_M model, the file's command
# lines and patch series; the file keeps nothing, D29, so the kept run sets keep_weights_s); one call within the
# device's 10 minutes: build and model side by side, then full_size.py's configurations; results in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=benchmarks/device/full_size_prelude.sh
source benchmarks/device/full_size_prelude.sh
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
nproc | tee "$OUT/cpus.txt"
bash benchmarks/device/build_patched.sh > /tmp/build.log 2>&1 &
build=$!
python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/OR1-Behemoth.Q4_K_M.gguf" > "$OUT/model.txt"
wait $build || { tail -30 /tmp/build.log; exit 1; }
tail -n 1 /tmp/build.log | tee "$OUT/build.txt"
grep -c "clusterbook P4" /tmp/llama/llama.cpp/ggml/src/ggml-rpc/ggml-rpc.cpp | sed 's/^/P4 lines in the source: /'
python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
    --out "$OUT" --only "${CONFIGS:-kept=prompt:0;head_crash:2;keep_weights_s:120,sent=prompt:0;head_crash:1;keep_weights_s:0,one_gpu=one_device:1}" \
    2>&1 | tee "$OUT/kept.log"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
