#!/bin/bash
# Issue 31 on the device machine: the RPC fast-load patches (P1-P3: patches/rpc-hash-only-for-cache.patch,
# rpc-send-from-caller.patch, rpc-receive-pinned.patch) against the same b11434 build without them. The 8B-shaped Q8_0 model split 1:1 between a head on GPU 0 and an RPC worker on GPU 1 over
# loopback TCP, as the issue measured it: seconds to /health 200, alternated runs, one GPU alone for reference, the
# mixes (patched head with a plain worker and the reverse), and a digest of each run's greedy output, which must be
# the same everywhere. Writes $OUT/rpc-load.json.
set -euo pipefail
# shellcheck source=benchmarks/device/prelude.sh disable=SC2154  # bin and healthy() come from the prelude
source benchmarks/device/prelude.sh
rm -rf /tmp/plain /tmp/patched && mkdir -p /tmp/plain /tmp/patched && cp -a $bin/. /tmp/plain/
for p in hash-only-for-cache send-from-caller receive-pinned; do
    patch -p1 --batch --forward -d /tmp/llama < "patches/rpc-$p.patch"
done
start=$(date +%s)
cmake --build /tmp/llama/build -j "$(nproc)" --target llama-server ggml-rpc-server >/tmp/build2.log 2>&1 \
    || { tail -40 /tmp/build2.log; exit 1; }
echo "patched rebuild: $(( $(date +%s) - start )) s"
cp -a $bin/. /tmp/patched/
model=/tmp/models/8b.gguf
answer() { # port -> digest of a greedy completion
    curl -s "http://127.0.0.1:$1/completion" -d '{"prompt": "Write one sentence about memory bandwidth.",
        "n_predict": 32, "temperature": 0, "seed": 1}' | python3 -c "import json, sys; print(json.load(sys.stdin)['content'])" \
        | sha256sum | cut -c1-16
}
split() { # head-dir worker-dir -> "seconds digest"
    LD_LIBRARY_PATH=$2 CUDA_VISIBLE_DEVICES=1 "$2"/ggml-rpc-server -H 127.0.0.1 -p 50052 >/tmp/worker.log 2>&1 &
    local wpid=$!; sleep 2
    local t0; t0=$(python3 -c "import time; print(time.time())")
    LD_LIBRARY_PATH=$1 CUDA_VISIBLE_DEVICES=0 "$1"/llama-server -m "$model" -ngl 999 -c 4096 --port 18081 \
        --rpc 127.0.0.1:50052 -sm layer -ts 1,1 >/tmp/split.log 2>&1 &
    local pid=$!; local s; s=$(healthy "$t0" 18081 $pid) || { tail -20 /tmp/split.log /tmp/worker.log; exit 1; }
    local d; d=$(answer 18081)
    kill $pid; wait $pid 2>/dev/null || true; kill $wpid; wait $wpid 2>/dev/null || true
    echo "$s $d"
}
results=()
t0=$(python3 -c "import time; print(time.time())")
LD_LIBRARY_PATH=/tmp/plain CUDA_VISIBLE_DEVICES=0 /tmp/plain/llama-server -m $model -ngl 999 -c 4096 --port 18080 >/tmp/one.log 2>&1 &
pid=$!; one=$(healthy "$t0" 18080 $pid); one_d=$(answer 18080); kill $pid; wait $pid 2>/dev/null || true
echo "one GPU: $one s, output $one_d"
for run in 1 2 3; do
    read -r p pd <<<"$(split /tmp/plain /tmp/plain)"
    read -r q qd <<<"$(split /tmp/patched /tmp/patched)"
    echo "run $run: RPC 1:1 without the patch $p s ($pd), with it $q s ($qd)"
    results+=("{\"run\": $run, \"plain_s\": $p, \"patched_s\": $q, \"plain_out\": \"$pd\", \"patched_out\": \"$qd\"}")
done
read -r m1 m1d <<<"$(split /tmp/patched /tmp/plain)"
read -r m2 m2d <<<"$(split /tmp/plain /tmp/patched)"
echo "patched head, plain worker: $m1 s ($m1d); plain head, patched worker: $m2 s ($m2d)"
(IFS=,; echo "{\"bytes\": $(stat -c %s $model), \"one_gpu_s\": $one, \"one_gpu_out\": \"$one_d\", \"runs\": [${results[*]}],
 \"patched_head_plain_worker\": [$m1, \"$m1d\"], \"plain_head_patched_worker\": [$m2, \"$m2d\"]}") > "$OUT/rpc-load.json"
cat "$OUT/rpc-load.json"
