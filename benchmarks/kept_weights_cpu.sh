#!/bin/bash
# Issue 48, P10 (patches/rpc-hash-on-arrival.patch) on this machine's CPU backend: one RPC worker that keeps weights
# (GGML_RPC_KEEP_S=60) and a head started three times against it, SIGKILLed after the first two: seconds to
# /health, the greedy answer's digest (with its top log-probabilities), the bytes through loopback during each load,
# and the worker's own lines on what it kept, read back and reused. Each build's bin/ is run in turn, ROUNDS times.
#   benchmarks/kept_weights_cpu.sh MODEL BIN_DIR...        (ports 50921-50922; ROUNDS=2)
set -uo pipefail
model=$1
shift
lo() { awk '/ lo:/ {print $2}' /proc/net/dev; }
ask() {
    curl -s localhost:50922/completion -d '{"prompt":"The quick brown fox","n_predict":24,"temperature":0,"n_probs":3,"cache_prompt":false}' |
        python3 -c 'import json,sys,hashlib; d=json.load(sys.stdin); print(hashlib.sha256(json.dumps([d["content"],d["completion_probabilities"]]).encode()).hexdigest()[:16])'
}
start_head() {  # $1 bin dir, $2 label; sets head
    local b0 t0
    b0=$(lo)
    t0=$(date +%s.%N)
    LD_LIBRARY_PATH=$1 "$1/llama-server" -m "$model" --host 127.0.0.1 --port 50922 --rpc 127.0.0.1:50921 -ngl 99 \
        > /dev/null 2>&1 &
    head=$!
    for _ in $(seq 1200); do curl -sf localhost:50922/health > /dev/null && break; sleep 0.05; done
    echo "  $2: /health in $(python3 -c "import time; print(round(time.time() - $t0, 2))") s, answer $(ask)," \
        "loopback $(( ($(lo) - b0) / 1000000 )) MB"
}
for round in $(seq "${ROUNDS:-2}"); do
    for bin in "$@"; do
        echo "== round $round: $bin"
        GGML_RPC_KEEP_S=60 LD_LIBRARY_PATH=$bin "$bin/ggml-rpc-server" -H 127.0.0.1 -p 50921 > /tmp/kept-worker.log 2>&1 &
        worker=$!
        sleep 1
        start_head "$bin" "cold load"
        kill -9 "$head"; wait "$head" 2>/dev/null
        sleep 3
        start_head "$bin" "restart 1"
        kill -9 "$head"; wait "$head" 2>/dev/null
        sleep 3
        start_head "$bin" "restart 2"
        kill "$head"; wait "$head" 2>/dev/null
        kill "$worker"; wait "$worker" 2>/dev/null
        grep -E "keeping|hashed|reusing a kept buffer of [0-9]+ bytes with [1-9]" /tmp/kept-worker.log | sed 's/^/  worker: /'
    done
done
