"""Instrument a llama.cpp tree's RPC backend for measurement (not part of any build clusterbook deploys).

    python3 benchmarks/device/rpc_profile.py LLAMA_CPP_DIR

With GGML_RPC_PROF=1 in its environment, a head then prints when it exits, and a worker when its client goes, per
command the messages, the time they took (the head: on the wire, the reply included; the worker: handling it) and
where each side waited (the head's caller for its dispatcher; the worker for the next command), one line each:
`rpc-prof head GET_TENSOR n=1025 us=8718.4 bytes=...`. It edits ggml-rpc.cpp by its text, so it applies with or
without the patch series; an anchor it does not find is reported and skipped.
"""

# ruff: noqa: E501  (the C++ it inserts is kept on its own lines, as it will read in ggml-rpc.cpp)
import sys
from pathlib import Path

PROFILER = r'''
// clusterbook measurement (benchmarks/device/rpc_profile.py): GGML_RPC_PROF=1 counts, per command, the messages and
// the time they take, and where each side waits; printed when the head exits and when the worker's client goes
enum { PROF_WAIT_SEND = RPC_CMD_COUNT, PROF_WAIT_SYNC, PROF_WAIT_EVENT, PROF_IDLE, PROF_SLOTS };
static const char * prof_names[PROF_SLOTS] = {"ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE",
    "FREE_BUFFER", "BUFFER_CLEAR", "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR", "GRAPH_COMPUTE",
    "GET_DEVICE_MEMORY", "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO", "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR",
    "NONE", "wait:send", "wait:synchronize", "wait:event", "idle"};
struct rpc_prof {
    bool on = getenv("GGML_RPC_PROF") != nullptr;
    const char * who = "head";
    std::atomic<uint64_t> n[PROF_SLOTS] = {}, ns[PROF_SLOTS] = {}, bytes[PROF_SLOTS] = {};
    static uint64_t now() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    void add(int slot, uint64_t t0, uint64_t size = 0) {
        n[slot]++; ns[slot] += now() - t0; bytes[slot] += size;
    }
    void print() {
        if (!on) { return; }
        for (int i = 0; i < PROF_SLOTS; i++) {
            if (n[i] == 0) { continue; }
            fprintf(stderr, "rpc-prof %s %s n=%llu us=%.1f bytes=%llu\n", who, prof_names[i],
                    (unsigned long long) n[i].load(), ns[i].load() / 1e3, (unsigned long long) bytes[i].load());
            n[i] = 0; ns[i] = 0; bytes[i] = 0;
        }
    }
    ~rpc_prof() { print(); }
};
static rpc_prof prof;

'''

WAIT = "const uint64_t t_wait = prof.on ? rpc_prof::now() : 0;"

# (anchor, replacement, required): each anchor replaced wherever it occurs
EDITS = [
    ("#include <thread>\n", "#include <thread>\n#include <chrono>\n", True),
    ("// Try RPC_CMD_SET_TENSOR_HASH first", PROFILER + "// Try RPC_CMD_SET_TENSOR_HASH first", True),
    # the head's dispatcher: each command's time on the wire
    ("        if (!queue.pop(&msg_ptr)) {\n            break;\n        }\n",
     "        if (!queue.pop(&msg_ptr)) {\n            break;\n        }\n"
     "        const uint64_t t0 = prof.on ? rpc_prof::now() : 0;\n", True),
    ("        msg_ptr->completion.set_value();",
     "        if (prof.on && msg_ptr->cmd != RPC_CMD_NONE) { prof.add(msg_ptr->cmd, t0, msg_ptr->input_size + msg_ptr->output_size); }\n"
     "        msg_ptr->completion.set_value();", True),
    # with patches/rpc-direct-send.patch: a command sent from the caller's thread
    ("            deliver(*msg);\n            msg->completion.set_value();",
     "            const uint64_t t0 = prof.on ? rpc_prof::now() : 0;\n            deliver(*msg);\n"
     "            if (prof.on && msg->cmd != RPC_CMD_NONE) { prof.add(msg->cmd, t0, msg->input_size + msg->output_size); }\n"
     "            msg->completion.set_value();", False),
    # the head's caller, waiting for its dispatcher
    ("    future.wait();", f"    {WAIT}\n    future.wait();\n    if (prof.on) {{ prof.add(PROF_WAIT_SEND, t_wait); }}", False),
    # the same with patches/rpc-direct-send.patch: the waits spin first
    ("        wait_spinning(msg->completion.get_future().share());",
     f"        {WAIT}\n        wait_spinning(msg->completion.get_future().share());\n"
     "        if (prof.on) { prof.add(PROF_WAIT_SEND, t_wait); }", False),
    ("    wait_spinning(ev->sf);", f"    {WAIT}\n    wait_spinning(ev->sf);\n    if (prof.on) {{ prof.add(PROF_WAIT_EVENT, t_wait); }}",
     False),
    ("    // clusterbook P6: nothing queued, nothing to wait for; a little queued: spin while the dispatcher sends it\n",
     "    // clusterbook P6: nothing queued, nothing to wait for; a little queued: spin while the dispatcher sends it\n"
     f"    {WAIT}\n    struct prof_wait {{ uint64_t t; ~prof_wait() {{ if (prof.on) {{ prof.add(PROF_WAIT_SYNC, t); }} }} }} prof_w {{t_wait}};\n",
     False),
    ("        msg->completion.get_future().wait();\n    }",
     f"        {WAIT}\n        msg->completion.get_future().wait();\n        if (prof.on) {{ prof.add(PROF_WAIT_SEND, t_wait); }}\n    }}",
     False),
    ("    ev->sf.wait();", f"    {WAIT}\n    ev->sf.wait();\n    if (prof.on) {{ prof.add(PROF_WAIT_EVENT, t_wait); }}", False),
    ("    GGML_ASSERT(queue.push(msg));\n    msg->completion.get_future().wait();\n}",
     f"    GGML_ASSERT(queue.push(msg));\n    {WAIT}\n    msg->completion.get_future().wait();\n"
     "    if (prof.on) { prof.add(PROF_WAIT_SYNC, t_wait); }\n}", False),
    # the worker: each command's handling, and its wait for the next
    ("    sock->update_caps(req.conn_caps);\n    while (true) {\n        if (!sock->recv_data(&cmd, 1)) {\n            break;\n        }",
     "    sock->update_caps(req.conn_caps);\n    prof.who = \"worker\";\n"
     "    struct prof_at_end { ~prof_at_end() { prof.print(); } } prof_printer;\n    uint64_t t_cmd = 0;\n"
     "    while (true) {\n        if (prof.on && t_cmd) { prof.add(cmd, t_cmd); }\n"
     "        const uint64_t t_idle = prof.on ? rpc_prof::now() : 0;\n"
     "        if (!sock->recv_data(&cmd, 1)) {\n            break;\n        }\n"
     "        if (prof.on) { prof.add(PROF_IDLE, t_idle); t_cmd = rpc_prof::now(); }", True),
]


def instrument(text: str) -> tuple[str, list[str]]:
    """The source with the profiler's hooks, and the anchors not found."""
    missing = []
    for anchor, replacement, required in EDITS:
        if anchor not in text:
            missing.append(("required: " if required else "") + anchor.strip().splitlines()[0])
            continue
        text = text.replace(anchor, replacement)
    return text, missing


def main(root: str) -> int:
    path = Path(root) / "ggml/src/ggml-rpc/ggml-rpc.cpp"
    text, missing = instrument(path.read_text())
    path.write_text(text)
    for m in missing:
        print(f"rpc_profile: not found, skipped: {m}", file=sys.stderr)
    return 1 if any(m.startswith("required") for m in missing) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
