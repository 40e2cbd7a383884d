#!/usr/bin/env bash
# clusterbook's RPC series (patches/), tested as llama.cpp's tests/test-rpc-multi-server.sh tests RPC:
# test-rpc-kept-weights.sh SERVER CLIENT (ggml-rpc-server and test-rpc-kept-weights.cpp built against one build).
# A worker run with GGML_RPC_KEEP_S keeps a client's weights when it goes (P4), having hashed each as it arrived
# (P10), and the next client's identical weights are matched, not sent; a client's small writes, reads and graph
# computes keep their order (P6, P11, P12), again with both sides polling for the next message (P13).
set -euo pipefail

server=$1
client=$2
port=$((40000 + $$ % 10000))
endpoint="127.0.0.1:${port}"
test_dir=$(mktemp -d)

cleanup() {
    kill "${pid:-}" 2>/dev/null || true
    rm -rf "$test_dir"
}
trap cleanup EXIT

wait_for_port() {
    for _ in {1..600}; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

GGML_RPC_KEEP_S=30 "$server" --device CPU --host 127.0.0.1 --port "$port" >"$test_dir/server.log" 2>&1 &
pid=$!
wait_for_port "$port"

"$client" load "$endpoint"
for _ in {1..100}; do  # the worker notices the closed connection
    grep -q "keeping" "$test_dir/server.log" && break
    sleep 0.05
done
"$client" reload "$endpoint"
"$client" small "$endpoint"

fail() {
    echo "FAILED: $1" >&2
    cat "$test_dir/server.log" >&2
    exit 1
}
grep -q "keeping 1 buffers (3 weights)" "$test_dir/server.log" || fail "the worker kept the weights buffer"
grep -q "reusing a kept buffer of [0-9]* bytes with 3 weights" "$test_dir/server.log" || fail "the next client reused it"
if grep -q "sent without a hash" "$test_dir/server.log"; then
    fail "the worker read weights back instead of hashing them as they arrived"
fi

# P13: the same small traffic with both sides polling their sockets before they sleep
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
port=$((port + 1))
endpoint="127.0.0.1:${port}"
GGML_RPC_SPIN_US=20000 "$server" --device CPU --host 127.0.0.1 --port "$port" >"$test_dir/server.log" 2>&1 &
pid=$!
wait_for_port "$port"
echo "with GGML_RPC_SPIN_US (P13):"
GGML_RPC_SPIN_US=20000 "$client" small "$endpoint"
echo "test-rpc-kept-weights: ok"
