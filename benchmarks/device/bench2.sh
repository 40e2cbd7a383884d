#!/bin/bash
# Stage 2 (second run): one-GPU baselines, the tuned rehearsal benched (decode from plain requests, TTFT
# streamed), and the tune with its parallel-slot axis. After build.sh on the same warm machine.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD COLUMNS=160 PYTHONUNBUFFERED=1
BIN=/tmp/llama/build/bin
MODEL=/tmp/models/random-8b-q8_0.gguf
mkdir -p reports "$OUT"
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml "$MODEL" > /dev/null
sed -i 's/batch_size: 2048/batch_size: 512/; s/^  parallel: 1$/  parallel: 1\n  flash_attn: "on"/' /tmp/device-cluster.yaml
cp /tmp/device-cluster.yaml "$OUT/cluster-tuned.yaml"
echo "== one GPU, llama-bench"
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=0 $BIN/llama-bench -m $MODEL -ngl 99 -p 512 -n 128 -r 3 -fa 1 -b 512 -o json \
    > "$OUT/llama-bench-1gpu.json" 2>/dev/null
python3 -c "import json; [print(r['n_prompt'], r['n_gen'], round(r['avg_ts'],1)) for r in json.load(open('$OUT/llama-bench-1gpu.json'))]"
bash benchmarks/device/one_gpu_http.sh 2>&1 | tail -4
echo "== tuned rehearsal + bench"
python3 -m invoke bench.rehearse --cluster /tmp/device-cluster.yaml 2>&1 | tail -32
cp reports/bench.json reports/bench-summary.md reports/rehearsal-gpu-memory.json "$OUT/" 2>/dev/null
echo "== tune (grid + parallel slots)"
python3 -m invoke bench.tune --cluster /tmp/device-cluster.yaml 2>&1 | tail -16
cp reports/tune.json "$OUT/" 2>/dev/null
true
