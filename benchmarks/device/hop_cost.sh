#!/bin/bash
# Issue 48 item 1 on a 2-GPU machine (or one, shared by head and worker): what one RPC hop costs per token and what
# the served split tier reaches against one GPU, for the cluster's patch series without the named patches (v0) and
# then with each added in turn (v1, v2, ...), every build instrumented by rpc_profile.py (off unless PROFILE=1);
# the 8B-shaped Q8_0 and (BIG=1, the default) beefcake2's 72B-shaped Q4_K_M; ROUNDS alternated rounds (2), the
# baselines in each; SERVE_WITH="NAME=FLAGS;..." llama-server flags served too; SMALL=0 no 8B, SERVE=0 no
# llama-server (llama-bench only). A PATCH written env:K=V runs the build before again with K=V in its head's
# environment. Every build also carries sched_profile.py (the head's scheduler, per token).   hop_cost.sh PATCH...
# Started in the background (setsid) by the device call: progress in $W/run.log, results in $W/results.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
W=${W:-/tmp/hop}
R=$W/results
mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$R/gpus.txt"
nproc | tee "$R/cpus.txt"
M=/dev/shm/models
[ "$(df --output=avail -B1G /dev/shm | tail -n 1)" -gt 60 ] || M=/tmp/models
mkdir -p "$M"
targets="ggml-rpc-server llama-bench"
[ "${SERVE:-1}" = 0 ] || targets="$targets llama-server"
LEAVE_OUT="$*" TARGETS="$targets" bash benchmarks/device/build_patched.sh \
    > "$W/build.log" 2>&1 &
build=$!
start=$(date +%s)
[ "${SMALL:-1}" = 0 ] || python3 benchmarks/device/make_model.py "$M/8b.gguf" 8b
[ "${BIG:-1}" = 0 ] || python3 benchmarks/device/make_shaped_model.py cluster.yaml OR1-Behemoth "$M/72b.gguf" \
    | tee "$R/model.txt"
echo "models: $(( $(date +%s) - start )) s"
wait $build || { tail -30 "$W/build.log"; exit 1; }
tail -n 1 "$W/build.log" | tee "$R/build.txt"
src=/tmp/llama/llama.cpp
rpc=ggml/src/ggml-rpc/ggml-rpc.cpp
instrumented=("$rpc" ggml/src/ggml-backend.cpp)  # kept clean in $W/clean, so each patch applies to the text it was made on
mkdir -p "$W/clean"
for f in "${instrumented[@]}"; do cp "$src/$f" "$W/clean/"; done
variants=()
i=0
for p in "" "$@"; do  # v0: the series; then each named patch on top of the one before
    if [[ $p == env:* ]]; then  # env:K=V: the build before, its head run with K=V
        variants+=(--variant "v$i=$W/v$((i - 1))" --head-env "v$i=${p#env:}")
        echo "v$i: v$((i - 1))'s build, the head with ${p#env:}"
        i=$((i + 1))
        continue
    fi
    for f in "${instrumented[@]}"; do cp "$W/clean/${f##*/}" "$src/$f"; done
    if [ -n "$p" ]; then
        patch -d "$src" -p1 < "$p" || exit 1
        for f in "${instrumented[@]}"; do cp "$src/$f" "$W/clean/"; done
    fi
    python3 benchmarks/device/rpc_profile.py "$src" || exit 1
    python3 benchmarks/device/sched_profile.py "$src" || exit 1
    # shellcheck disable=SC2086  # a list of targets
    cmake --build "$src/build" -j "$(nproc)" --target $targets > /dev/null || exit 1
    rm -rf "$W/v$i" && cp -r "$src/build/bin" "$W/v$i"
    variants+=(--variant "v$i=$W/v$i")
    echo "v$i: ${p:-the series} $(grep -c 'clusterbook P' "$src/$rpc") patched lines"
    i=$((i + 1))
done
models=()
[ "${SMALL:-1}" = 0 ] || models+=(--model "8b=$M/8b.gguf:128")
[ "${BIG:-1}" = 0 ] || models+=(--model "72b=$M/72b.gguf:64")
gpus=$(nvidia-smi -L | wc -l)
profile=()
[ "${PROFILE:-0}" = 0 ] || profile=(--profile)
[ "${SERVE:-1}" = 1 ] || profile+=(--no-serve)
serve_with=()  # SERVE_WITH="NAME=FLAGS;NAME=FLAGS": llama-server flags served too
IFS=';' read -ra cfgs <<< "${SERVE_WITH:-}"
for c in "${cfgs[@]}"; do serve_with+=(--serve-with "$c"); done
python3 benchmarks/device/hop_cost.py --out "$R" "${variants[@]}" "${models[@]}" --worker-gpu "$((gpus > 1 ? 1 : 0))" \
    --rounds "${ROUNDS:-2}" \
    "${profile[@]}" "${serve_with[@]}" 2>&1 | tee "$R/summary.txt"
tar czf "$R/logs.tgz" -C "$R" logs && rm -rf "$R/logs"
echo FINISHED
