#!/bin/bash
# After build.sh: one-GPU and RPC llama-bench references, then server_path.py's variants on the tuned tier.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
BIN=/tmp/llama/build/bin
MODEL=/tmp/models/random-8b-q8_0.gguf
python3 benchmarks/device/make_cluster.py /tmp/device-cluster.yaml "$MODEL" > /dev/null
sed -i 's/batch_size: 2048/batch_size: 512/; s/^  parallel: 1$/  parallel: 1\n  flash_attn: "on"/' /tmp/device-cluster.yaml
lscpu | grep -i "numa\|model name"; nvidia-smi topo -m | head -4
echo "== llama-bench, one GPU"
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=0 $BIN/llama-bench -m $MODEL -ngl 99 -p 0 -n 128 -r 5 -fa 1 -b 512 -ub 512 \
    -o json > "$OUT/llama-bench-1gpu.json" 2>/dev/null
echo "== llama-bench over RPC (worker on GPU 1)"
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=1 $BIN/ggml-rpc-server --host 127.0.0.2 --port 50052 > /tmp/bench-worker.log 2>&1 &
w=$!; sleep 3
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=0 $BIN/llama-bench -m $MODEL -ngl 99 -p 0 -n 128 -r 5 -fa 1 -b 512 -ub 512 \
    -sm layer -ts 1/1 --rpc 127.0.0.2:50052 -o json > "$OUT/llama-bench-rpc.json" 2>/dev/null
kill $w; wait $w 2>/dev/null
python3 -c "
import json
for f in ('1gpu', 'rpc'):
    for r in json.load(open('$OUT/llama-bench-' + f + '.json')):
        print(f, r['n_gen'], round(r['avg_ts'], 1), [round(x, 1) for x in r['samples_ts']])"
echo "== server variants"
mkdir -p /tmp/sp
python3 benchmarks/device/server_path.py /tmp/device-cluster.yaml "$OUT" "${1:-flags}" /tmp/sp
grep -ih "pipeline\|graph\|sampl\|error" /tmp/sp/head-2.log /tmp/sp/head-3.log | head -40 > "$OUT/head-notes.txt"
true
