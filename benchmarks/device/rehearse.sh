#!/bin/bash
# Stage 2b: the rehearsal and its bench, with the tune's recommendation applied (after build.sh and bench.sh).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD COLUMNS=160 PYTHONUNBUFFERED=1
mkdir -p reports "$OUT"
sed -i 's/batch_size: 2048/batch_size: 512/; s/  parallel: 1/  parallel: 1\n    flash_attn: "on"/' /tmp/device-cluster.yaml
grep -A16 "^tiers" /tmp/device-cluster.yaml
python3 -m invoke bench.rehearse --cluster /tmp/device-cluster.yaml 2>&1 | tail -45
cp /tmp/device-cluster.yaml "$OUT/cluster-tuned.yaml"
cp reports/bench.json reports/bench-summary.md reports/rehearsal-gpu-memory.json "$OUT/" 2>/dev/null
true
