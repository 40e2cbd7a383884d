# Sourced by the device scripts: wheels on PYTHONPATH, llama.cpp b11434 built with the options the cluster's GPUs
# give (CUDA on, their compute capability, RPC on), the two random-weights models, and healthy() for timing loads.
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
