// clusterbook's RPC series (patches/), tested the way llama.cpp's tests/test-rpc-multi-server.cpp tests RPC: a client
// against ggml-rpc-server processes that test-rpc-kept-weights.sh starts. Modes:
//   load ENDPOINT    a weights buffer with three 12 MiB tensors (over the 10 MiB a head hashes) and a small one,
//                    written and read back; the process then exits without freeing it, as a crashed head would (P4)
//   reload ENDPOINT  the same buffer and data again: the worker kept them (P4), hashed as they arrived (P10), so
//                    the writes are matched by hash and not sent; every byte read back is checked
//   small ENDPOINT   300 tokens' worth of small writes (asynchronous and not), reads and graph computes interleaved
//                    on one connection: each read sees every write before it (P6, P11, P12), each sum is right
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "ggml.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const int64_t N_BIG = 3 * 1024 * 1024;  // F32 elements: 12 MiB
static const int64_t N_SMALL = 256;

static float value(int tensor, int64_t i) {
    return (float) ((i * 7 + tensor * 13) % 1021) * 0.25f;
}

static void check(bool ok, const char * what) {
    if (!ok) {
        fprintf(stderr, "FAILED: %s\n", what);
        exit(1);
    }
}

static int weights(const char * endpoint, bool reload) {
    ggml_init_params params = { 5 * ggml_tensor_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * t[4];
    for (int k = 0; k < 4; k++) {
        t[k] = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, k < 3 ? N_BIG : N_SMALL);
    }
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_rpc_buffer_type(endpoint, 0));
    check(buffer != nullptr, "allocate the weights buffer");
    ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<float> data, back;
    for (int k = 0; k < 4; k++) {
        data.resize(ggml_nelements(t[k]));
        for (int64_t i = 0; i < ggml_nelements(t[k]); i++) {
            data[i] = value(k, i);
        }
        ggml_backend_tensor_set(t[k], data.data(), 0, ggml_nbytes(t[k]));
    }
    for (int k = 0; k < 4; k++) {
        back.assign(ggml_nelements(t[k]), -1.0f);
        ggml_backend_tensor_get(t[k], back.data(), 0, ggml_nbytes(t[k]));
        for (int64_t i = 0; i < ggml_nelements(t[k]); i++) {
            check(back[i] == value(k, i), reload ? "a kept weight reads back as written" : "a weight reads back");
        }
    }
    if (!reload) {
        printf("load: ok\n");
        fflush(stdout);
        _Exit(0);  // no FREE_BUFFER: the connection just ends, as a crashed head's does
    }
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    return 0;
}

static int small(const char * endpoint) {
    ggml_backend_t backend = ggml_backend_rpc_init(endpoint, 0);
    check(backend != nullptr, "connect");
    ggml_init_params params = { 4 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N_SMALL);
    ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N_SMALL);
    ggml_tensor * c = ggml_add(ctx, a, b);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, c);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    check(buffer != nullptr, "allocate");
    std::vector<float> va(N_SMALL), vb(N_SMALL), vc(N_SMALL);
    const int64_t quarter = N_SMALL / 4;
    for (int token = 0; token < 300; token++) {
        for (int64_t i = 0; i < N_SMALL; i++) {
            va[i] = (float) (token * 3 + i);
            vb[i] = (float) (token - i) * 0.5f;
        }
        for (int q = 0; q < 4; q++) {  // a in four asynchronous writes, b in one plain write
            ggml_backend_tensor_set_async(backend, a, va.data() + q * quarter, q * quarter * sizeof(float),
                                          quarter * sizeof(float));
        }
        ggml_backend_tensor_set(b, vb.data(), 0, ggml_nbytes(b));
        if (token % 3 == 0) {  // a read between writes and the graph sees the writes
            std::vector<float> got(N_SMALL, -1.0f);
            ggml_backend_tensor_get(a, got.data(), 0, ggml_nbytes(a));
            check(memcmp(got.data(), va.data(), ggml_nbytes(a)) == 0, "a read sees the writes before it");
        }
        check(ggml_backend_graph_compute(backend, graph) == GGML_STATUS_SUCCESS, "compute");
        ggml_backend_tensor_get(c, vc.data(), 0, ggml_nbytes(c));
        for (int64_t i = 0; i < N_SMALL; i++) {
            check(vc[i] == va[i] + vb[i], "each token's sum is of that token's inputs");
        }
    }
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return 0;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s load|reload|small ENDPOINT\n", argv[0]);
        return 2;
    }
    const char * mode = argv[1];
    int rc = strcmp(mode, "small") == 0 ? small(argv[2]) : weights(argv[2], strcmp(mode, "reload") == 0);
    printf("%s: ok\n", mode);
    return rc;
}
