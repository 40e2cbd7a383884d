#!/bin/bash
# Stage 2 on the device machine: one-GPU baseline, the rehearsal over RPC, bench, plan and tune; reports to $OUT.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD COLUMNS=160 PYTHONUNBUFFERED=1
BIN=/tmp/llama/build/bin
MODEL=/tmp/models/random-8b-q8_0.gguf
mkdir -p reports "$OUT"
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml "$MODEL" > "$OUT/cluster.yaml"
echo "== one GPU, llama-bench"
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=0 $BIN/llama-bench -m $MODEL -ngl 99 -p 512 -n 128 -r 3 -o json \
    > "$OUT/llama-bench-1gpu.json" 2>"$OUT/llama-bench-1gpu.log"
python3 -c "import json; [print(r['n_prompt'], r['n_gen'], round(r['avg_ts'],1)) for r in json.load(open('$OUT/llama-bench-1gpu.json'))]"
echo "== plan"
python3 -m invoke plan --cluster /tmp/device-cluster.yaml --models-dir /tmp/models --json > "$OUT/plan.json"
python3 -m invoke plan --cluster /tmp/device-cluster.yaml --models-dir /tmp/models
echo "== rehearsal + bench"
python3 -m invoke bench.rehearse --cluster /tmp/device-cluster.yaml 2>&1 | tail -40
cp reports/bench.json reports/bench-summary.md "$OUT/" 2>/dev/null
cp reports/rehearsal-gpu-memory.json "$OUT/" 2>/dev/null
cp -r reports/rehearsal "$OUT/rehearsal-logs" 2>/dev/null
echo "== tune"
python3 -m invoke bench.tune --cluster /tmp/device-cluster.yaml 2>&1 | tail -30
cp reports/tune.json "$OUT/" 2>/dev/null
true
