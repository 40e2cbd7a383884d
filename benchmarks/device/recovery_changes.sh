#!/bin/bash
# Issue 21 on the device machine: what shortens a split tier's reload after a worker crash, one change at a time.
# The 8B-shaped model (8.54 GB, page cache), head on GPU 0 and one RPC worker on GPU 1 over loopback TCP; seconds
# from the head's start to /health 200: the 1:1 split as deployed; the worker's tensor cache (-c) cold (empty
# LLAMA_CACHE) and warm (a new worker process on the same cache, as after a crash); less over RPC (-ts 1,3 and 1,7:
# llama.cpp lists the RPC devices before the local GPU, so the first share is the worker's).
# ONLY=splits: just the baseline and the splits.
# Writes $OUT/recovery-changes.json.
set -euo pipefail
source benchmarks/device/prelude.sh
model=/tmp/models/8b.gguf
results=()
load() { # label ts worker-flags...
    local label=$1 ts=$2
    shift 2
    CUDA_VISIBLE_DEVICES=1 $bin/ggml-rpc-server -H 127.0.0.1 -p 50052 "$@" >>/tmp/worker-$label.log 2>&1 &
    local wpid=$!
    sleep 2
    local t0
    t0=$(python3 -c "import time; print(time.time())")
    CUDA_VISIBLE_DEVICES=0 $bin/llama-server -m $model -ngl 999 -c 4096 --port 18081 \
        --rpc 127.0.0.1:50052 -sm layer -ts "$ts" >/tmp/split-$label.log 2>&1 &
    local pid=$!
    local s
    s=$(healthy "$t0" 18081 $pid) || s=null
    kill $pid; wait $pid 2>/dev/null || true
    kill $wpid; wait $wpid 2>/dev/null || true
    grep -E "model buffer size" "/tmp/split-$label.log" || true
    local remote
    remote=$(grep -E "RPC[^ ]* model buffer size" "/tmp/split-$label.log" | grep -oE "[0-9.]+ MiB" | head -1 || true)
    echo "$label (ts $ts, worker $*): $s s; worker share ${remote:-?}"
    results+=("{\"change\": \"$label\", \"tensor_split\": \"$ts\", \"worker_flags\": \"$*\", \"seconds\": $s, \"worker_share\": \"${remote:-}\"}")
}
export LLAMA_CACHE=/tmp/rpc-cache
for run in 1 2; do
    load baseline 1,1
    if [ "${ONLY:-}" != splits ]; then
        rm -rf /tmp/rpc-cache
        load cache-cold 1,1 -c
        load cache-warm 1,1 -c
        load cache-warm 1,1 -c
    fi
    load worker-quarter 1,3
    load worker-eighth 1,7
done
du -sh /tmp/rpc-cache || true
(IFS=,; echo "[${results[*]}]") > "$OUT/recovery-changes.json"
cat "$OUT/recovery-changes.json"
