#!/bin/bash
# beefcake2's reasoning tier at full size on a 2-GPU machine (issue 43). Started in the background by the device
# call (setsid), since it outlasts one call: progress in /tmp/fs/run.log, results in /tmp/fs/results.
#   - llama.cpp b11434 with beefcake2's patch series and CMake options, for this machine's compute capability, with
#     GGML_CUDA_FORCE_CUBLAS=ON: a V100S (no int8 tensor cores) multiplies prompt batches with cuBLAS in F16, and
#     that path's temporary buffers are in the CUDA pool it measures;
#   - a random-weights model of the cluster file's OR1-Behemoth (80 blocks, Q4_K_M's tensor types, 47.41 GB) and
#     the same widths with 2 blocks, written while llama.cpp builds;
#   - full_size.py: the configurations named in $CONFIGS, each GPU held to a V100S's free memory.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
W=${W:-/tmp/fs}
mkdir -p "$W/results"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$W/results/gpus.txt"
M=/dev/shm/models
[ "$(df --output=avail -B1G /dev/shm | tail -n 1)" -gt 60 ] || M=/tmp/models
mkdir -p "$M"
df -h "$M" | tee -a "$W/results/gpus.txt"
bash benchmarks/device/build_patched.sh > "$W/build.log" 2>&1 &
build=$!
start=$(date +%s)
[ "${SMALL:-1}" = 0 ] || python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/small.gguf" --layers 2
python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/OR1-Behemoth.Q4_K_M.gguf" \
    | tee "$W/results/model.txt"
echo "models: $(( $(date +%s) - start )) s"
wait $build || { tail -30 "$W/build.log"; exit 1; }
tail -n 1 "$W/build.log" | tee -a "$W/results/gpus.txt"
python3 benchmarks/device/full_size.py cluster.yaml reasoning --bin /tmp/llama/llama.cpp/build/bin --models "$M" \
    --out "$W/results" --only "$CONFIGS"
tar czf "$W/results/logs.tgz" -C "$W/results" logs  # the servers' logs, two folders down: they come back
echo FINISHED
