#!/bin/bash
# Issue 48, item 3 at full size: beefcake2's reasoning tier (the 72B-shaped Q4_K_M model, the file's command lines
# and patch series, each process held to a V100S's memory, prompt batches through cuBLAS as on a V100S) answering a
# prompt of 8K, 16K and 32K tokens: the time to first token with the file's settings and with flash attention on at
# ubatch 256, 512 and 1024. Started in the background (setsid) since it outlasts one call: progress in
# /tmp/pt/run.log, results in /tmp/pt/results (full-size.json, the servers' logs in logs.tgz).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${W:-/tmp/pt}/results
# shellcheck source=benchmarks/device/full_size_prelude.sh
source benchmarks/device/full_size_prelude.sh
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
bash benchmarks/device/build_patched.sh > /tmp/build.log 2>&1 &
build=$!
python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/OR1-Behemoth.Q4_K_M.gguf" > "$OUT/model.txt"
wait $build || { tail -30 /tmp/build.log; exit 1; }
tail -n 1 /tmp/build.log | tee "$OUT/build.txt"
P="prompt:0;crash:0;prompts:8192/16384/32704"
python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
    --out "$OUT" --only "${CONFIGS:-as_file=$P,fa256=flash_attn:on;$P,fa512=flash_attn:on;ubatch_size:512;batch_size:512;$P,fa1024=flash_attn:on;ubatch_size:1024;batch_size:1024;$P}" \
    2>&1 | tee "$OUT/prompts.log"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo FINISHED
