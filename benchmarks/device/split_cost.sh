#!/bin/bash
# After build.sh: the tuned tier rehearsed and benched by `invoke bench.rehearse`, which also measures what the
# split costs (the same flags on GPU 0 alone, by llama-bench and by llama-server over HTTP).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD COLUMNS=160 PYTHONUNBUFFERED=1
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml /tmp/models/random-8b-q8_0.gguf > /dev/null
sed -i 's/batch_size: 2048/batch_size: 512/; s/^  parallel: 1$/  parallel: 1\n  flash_attn: "on"/' /tmp/device-cluster.yaml
cp /tmp/device-cluster.yaml "$OUT/cluster-tuned.yaml"
python3 -m invoke bench.rehearse --cluster /tmp/device-cluster.yaml 2>&1
cp reports/bench.json reports/bench-summary.md reports/rehearsal-gpu-memory.json "$OUT/" 2>/dev/null
true
