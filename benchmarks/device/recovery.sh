#!/bin/bash
# Issue 31 on the device machine: a worker crash and the recovery a SLURM job script does inside its job, timed
# until a client is answered, for the b11434 build with and without the RPC fast-load patch. The 8B-shaped Q8_0
# model split 1:1: the head on GPU 0, one RPC worker on GPU 1, loopback TCP. There is no SLURM here: the sequence
# the batch script runs (tier.sbatch.j2's restart_steps) is run by the functions below, step for step: a watch
# every 1 s, the head stopped (SIGTERM, at most 10 s), the ended worker started, its port awaited every 0.5 s, the
# head started. A client asks for a chat completion every 0.25 s from the kill on. Writes $OUT/recovery.json.
set -euo pipefail
# shellcheck source=benchmarks/device/prelude.sh disable=SC2154  # bin comes from the prelude
source benchmarks/device/prelude.sh
rm -rf /tmp/plain /tmp/patched && mkdir -p /tmp/plain /tmp/patched && cp -a "$bin"/. /tmp/plain/
for p in hash-only-for-cache send-from-caller receive-pinned; do
    patch -p1 --batch --forward -d /tmp/llama < "patches/rpc-$p.patch"
done
cmake --build /tmp/llama/build -j "$(nproc)" --target llama-server ggml-rpc-server >/tmp/build2.log 2>&1 \
    || { tail -40 /tmp/build2.log; exit 1; }
cp -a "$bin"/. /tmp/patched/
model=/tmp/models/8b.gguf
now() { python3 -c "import time; print(time.time())"; }

start_worker() { LD_LIBRARY_PATH=$dir CUDA_VISIBLE_DEVICES=1 "$dir/ggml-rpc-server" -H 127.0.0.1 -p 50052 >>/tmp/worker.log 2>&1 & wpid=$!; }
start_head() {
    LD_LIBRARY_PATH=$dir CUDA_VISIBLE_DEVICES=0 "$dir/llama-server" -m $model -ngl 999 -c 4096 --port 18081 \
        --rpc 127.0.0.1:50052 -sm layer -ts 1,1 >>/tmp/head.log 2>&1 &
    hpid=$!
}
wait_port() { until (echo >/dev/tcp/127.0.0.1/50052) 2>/dev/null; do sleep 0.5; done; }
stop_head() {
    kill -TERM "$hpid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$hpid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$hpid" 2>/dev/null || true
    wait "$hpid" 2>/dev/null || true
}
answered() { # t0 -> seconds from t0 until a chat completion is answered (polling every 0.25 s)
    python3 - "$1" <<'EOF'
import json, sys, time, urllib.request
t0 = float(sys.argv[1])
body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
while time.time() - t0 < 600:
    try:
        req = urllib.request.Request("http://127.0.0.1:18081/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status == 200:
                print(round(time.time() - t0, 2)); sys.exit(0)
    except Exception:
        pass
    time.sleep(0.25)
sys.exit(1)
EOF
}

results=()
for build in plain patched; do
    dir=/tmp/$build
    : >/tmp/head.log; : >/tmp/worker.log
    start_worker; wait_port; start_head
    answered "$(now)" >/dev/null
    for run in 1 2 3; do
        t0=$(now)
        kill -KILL "$wpid"; wait "$wpid" 2>/dev/null || true
        # the job script's watch (every 1 s) sees the step gone at its next look
        python3 -c "import random, time; time.sleep(random.random())"
        restart_started=$(now)
        stop_head; start_worker; wait_port; start_head
        worker_up=$(python3 -c "print(round($(now) - $t0, 2))")
        back=$(answered "$t0")
        load=$(grep -o 'model loaded' /tmp/head.log | wc -l)
        echo "$build run $run: back after $back s (restart began $(python3 -c "print(round($restart_started - $t0, 2))") s, head started $worker_up s)"
        results+=("{\"build\": \"$build\", \"run\": $run, \"back_s\": $back, \"head_started_s\": $worker_up, \"loads_logged\": $load}")
    done
    stop_head; kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
done
(IFS=,; echo "{\"bytes\": $(stat -c %s $model), \"runs\": [${results[*]}]}") >"$OUT/recovery.json"
cat "$OUT/recovery.json"
