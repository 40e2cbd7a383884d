#!/bin/bash
# Issue 21 on the device machine: how long a tier's head takes to load, alone on GPU 0 and split 1:1 with an RPC
# worker on GPU 1 (loopback TCP), for two model sizes. Build with the options the build runbook derives (CUDA on,
# the GPUs' compute capability, RPC on). Writes $OUT/load-times.json; the planner's prediction is compared locally.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
[ -x /tmp/llama/build/bin/llama-server ] || { mkdir -p /tmp/llama && tar xzf .device/llama-src.tar.gz -C /tmp/llama; }
start=$(date +%s)
cmake -S /tmp/llama -B /tmp/llama/build -G Ninja -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_NUMBER=11434 >/tmp/cmake.log
cmake --build /tmp/llama/build -j "$(nproc)" --target llama-server ggml-rpc-server >/tmp/build.log 2>&1 \
    || { tail -40 /tmp/build.log; exit 1; }
echo "build (CMAKE_CUDA_ARCHITECTURES=$cc): $(( $(date +%s) - start )) s"
bin=/tmp/llama/build/bin
mkdir -p /tmp/models
for shape in 8b 3b; do [ -s /tmp/models/$shape.gguf ] || python3 benchmarks/device/make_model.py /tmp/models/$shape.gguf $shape; done
cat /tmp/models/*.gguf > /dev/null  # in page cache, as after a crash

healthy() { # port pid -> seconds until /health answers 200 (or exit 1)
    local t0=$1 port=$2 pid=$3
    for _ in $(seq 1200); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health" && { python3 -c "import time; print(round(time.time() - $t0, 2))"; return 0; }
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
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
