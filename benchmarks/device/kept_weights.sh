#!/bin/bash
# Issue 48 at full size: a split tier's head restarted while its worker keeps the weights (patches/
# rpc-keep-weights.patch) against the same restart with the worker told to keep nothing (keep_weights_s 0), beside
# the whole model loaded on one GPU. beefcake2's reasoning tier (the 72B-shaped Q4_K_M model, the file's command
# lines and patch series; each run sets its own keep_weights_s, the file's is 60, D31); one call within the
# device's 10 minutes: build and model side by side, then full_size.py's configurations; results in $OUT. The build
# is the file's series; $WITHOUT (below) repeats the kept run without one of its patches.
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
# WITHOUT=patches/X.patch: the kept run again on the same machine with that patch of the series reversed (only
# ggml-rpc is rebuilt), into $OUT/without (P10: WITHOUT=patches/rpc-hash-on-arrival.patch, its first restart waits
# for the worker's read-back)
if [ -n "${WITHOUT:-}" ]; then
    patch -R -p1 -d /tmp/llama/llama.cpp < "$WITHOUT" || exit 1
    cmake --build /tmp/llama/llama.cpp/build -j "$(nproc)" --target llama-server ggml-rpc-server > /dev/null || exit 1
    mkdir -p "$OUT/without"
    echo "without $WITHOUT" | tee "$OUT/without/patch.txt"
    python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
        --out "$OUT/without" --only "kept=prompt:0;head_crash:2;keep_weights_s:120" 2>&1 | tee "$OUT/without/kept.log"
    tar czf "$OUT/without/logs.tgz" -C "$OUT/without" logs && rm -rf "$OUT/without/logs"
fi
