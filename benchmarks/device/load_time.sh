#!/bin/bash
# Issue 21 on the device machine: how long a tier's head takes to load, alone on GPU 0 and split 1:1 with an RPC
# worker on GPU 1 (loopback TCP), for two model sizes. Build with the options the build runbook derives (CUDA on,
# the GPUs' compute capability, RPC on). Writes $OUT/load-times.json; the planner's prediction is compared locally.
set -euo pipefail
source benchmarks/device/prelude.sh
results=()
for shape in 8b 3b; do
    size=$(stat -c %s /tmp/models/$shape.gguf)
    for run in 1 2; do
        t0=$(python3 -c "import time; print(time.time())")
        CUDA_VISIBLE_DEVICES=0 $bin/llama-server -m /tmp/models/$shape.gguf -ngl 999 -c 4096 --port 18080 >/tmp/one.log 2>&1 &
        pid=$!; one=$(healthy "$t0" 18080 $pid); kill $pid; wait $pid 2>/dev/null || true
        CUDA_VISIBLE_DEVICES=1 $bin/ggml-rpc-server -H 127.0.0.1 -p 50052 >/tmp/worker.log 2>&1 &
        wpid=$!; sleep 2
        t0=$(python3 -c "import time; print(time.time())")
        CUDA_VISIBLE_DEVICES=0 $bin/llama-server -m /tmp/models/$shape.gguf -ngl 999 -c 4096 --port 18081 \
            --rpc 127.0.0.1:50052 -sm layer -ts 1,1 >/tmp/split.log 2>&1 &
        pid=$!; split=$(healthy "$t0" 18081 $pid); kill $pid; wait $pid 2>/dev/null || true
        kill $wpid; wait $wpid 2>/dev/null || true
        echo "$shape run $run: $size bytes, one GPU $one s, split 1:1 over RPC $split s"
        grep -E "buffer size" /tmp/split.log | head -4 || true
        results+=("{\"shape\": \"$shape\", \"run\": $run, \"bytes\": $size, \"one_gpu_s\": $one, \"split_s\": $split}")
    done
done
(IFS=,; echo "[${results[*]}]") > "$OUT/load-times.json"
cat "$OUT/load-times.json"
