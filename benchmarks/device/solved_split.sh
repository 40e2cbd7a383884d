#!/bin/bash
# Issue 30 on 2 GPUs: the device cluster written with an uneven split (1:3), `invoke plan --solve` finds the split,
# its diff is applied with patch, and the solved tier is rehearsed: each GPU's nvidia-smi memory beside the plan.
set -uo pipefail
export COLUMNS=160 PYTHONUNBUFFERED=1
source benchmarks/device/prelude.sh
mkdir -p reports "$OUT"
python3 benchmarks/device/make_cluster.py /tmp/solve.yaml /tmp/models/8b.gguf > /dev/null
sed -i 's/tensor_split: {gpu0: 1, gpu1: 1}/tensor_split: {gpu0: 1, gpu1: 3}/' /tmp/solve.yaml
cp /tmp/solve.yaml "$OUT/cluster-written.yaml"
grep -n "tensor_split\|head:\|workers:" /tmp/solve.yaml
echo "== solve"
python3 -m invoke plan --solve --cluster /tmp/solve.yaml | tee "$OUT/solve.txt"
python3 -m invoke plan --solve --json --cluster /tmp/solve.yaml > "$OUT/solve.json"
python3 -c "import json; print(json.load(open('$OUT/solve.json'))['diff'], end='')" > "$OUT/solve.diff"
patch /tmp/solve.yaml < "$OUT/solve.diff" || { echo "the diff did not apply"; exit 1; }
cp /tmp/solve.yaml "$OUT/cluster-solved.yaml"
python3 -m invoke plan --cluster /tmp/solve.yaml --models-dir /tmp/models --json > "$OUT/plan.json"
python3 -m invoke plan --cluster /tmp/solve.yaml --models-dir /tmp/models | head -30
echo "== rehearsal of the solved placement"
cmake --build /tmp/llama/build -j "$(nproc)" --target llama-bench >/tmp/build-bench.log 2>&1 || tail -20 /tmp/build-bench.log
python3 -m invoke bench.rehearse --quick --cluster /tmp/solve.yaml --models-dir /tmp/models 2>&1 | tail -30
cp reports/rehearsal-gpu-memory.json "$OUT/" 2>/dev/null
cat "$OUT/rehearsal-gpu-memory.json"
true
