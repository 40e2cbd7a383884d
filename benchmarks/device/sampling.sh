#!/bin/bash
# After build.sh: the sampling experiment (benchmarks/device/sampling.py) on the tuned rehearsal cluster.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml /tmp/models/random-8b-q8_0.gguf > /dev/null
sed -i 's/batch_size: 2048/batch_size: 512/; s/^  parallel: 1$/  parallel: 1\n  flash_attn: "on"/' /tmp/device-cluster.yaml
python3 benchmarks/device/sampling.py /tmp/device-cluster.yaml 2>&1 | tee "$OUT/sampling.txt"
