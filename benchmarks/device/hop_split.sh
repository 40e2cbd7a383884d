#!/bin/bash
# Issue 48: an RPC hop's cost against where the layers are (hop_split.py), on a 2-GPU machine; one call within
# the device's 10 minutes: the cluster file's series built with llama-bench while the model is written, then the
# splits. MODEL=8b (default) or 72b (beefcake2's shape); SPLITS (default "1/3 1/1 3/1"); results in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
M=/dev/shm/models
mkdir -p "$M"
TARGETS="ggml-rpc-server llama-bench" bash benchmarks/device/build_patched.sh > /tmp/build.log 2>&1 &
build=$!
if [ "${MODEL:-8b}" = 72b ]; then
    python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/72b.gguf" > "$OUT/model.txt"
    spec="72b=$M/72b.gguf:64"
else
    python3 benchmarks/device/make_model.py "$M/8b.gguf" 8b
    spec="8b=$M/8b.gguf:128"
fi
wait $build || { tail -30 /tmp/build.log; exit 1; }
tail -n 1 /tmp/build.log | tee "$OUT/build.txt"
splits=()
for s in ${SPLITS:-1/3 1/1 3/1}; do splits+=(--split "$s"); done
python3 benchmarks/device/hop_split.py --out "$OUT" --bin /tmp/llama/llama.cpp/build/bin --model "$spec" \
    "${splits[@]}" --rounds "${ROUNDS:-3}" 2>&1 | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
