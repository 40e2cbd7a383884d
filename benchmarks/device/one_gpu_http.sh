#!/bin/bash
# Reference: llama-server on one GPU with the tuned flags, measured over HTTP exactly as the rehearsal is.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
BIN=/tmp/llama/build/bin
LD_LIBRARY_PATH=$BIN CUDA_VISIBLE_DEVICES=0 $BIN/llama-server -m /tmp/models/random-8b-q8_0.gguf --host 127.0.0.1 \
    --port 18090 -ngl 999 --ctx-size 4096 --parallel 1 --batch-size 512 --ubatch-size 512 --flash-attn on \
    > /tmp/one-gpu.log 2>&1 &
pid=$!
until curl -sf -o /dev/null http://127.0.0.1:18090/health; do sleep 0.5; done
python3 - <<'PY' | tee "$OUT/one-gpu-http.txt"
import statistics
from clusterbook.effects.benchmark import PROMPTS, _decode_only
_decode_only("http://127.0.0.1:18090", "m", None, "warm up", 8)
for name, prompt in PROMPTS.items():
    runs = [_decode_only("http://127.0.0.1:18090", "m", None, prompt, 128) for _ in range(3)]
    print(f"one GPU over HTTP, {name}: decode median {statistics.median(runs):.1f} tok/s {[round(r, 1) for r in runs]}")
PY
kill $pid
