#!/bin/bash
# Stage 1 on the device machine: build llama.cpp with CUDA and RPC, and write the 8B-shaped model.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
mkdir -p /tmp/llama && tar xzf .device/llama-src.tar.gz -C /tmp/llama
start=$(date +%s)
cmake -S /tmp/llama -B /tmp/llama/build -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_NUMBER=11434 >/tmp/cmake.log
cmake --build /tmp/llama/build -j "$(nproc)" --target llama-server ggml-rpc-server llama-bench >/tmp/build.log 2>&1 \
    || { tail -40 /tmp/build.log; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
mkdir -p /tmp/models
start=$(date +%s)
python3 benchmarks/device/make_model.py /tmp/models/random-8b-q8_0.gguf
echo "model: $(( $(date +%s) - start )) s"
