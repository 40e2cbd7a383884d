"""Instrument a llama.cpp tree's backend scheduler for measurement (not part of any build clusterbook deploys).

    python3 benchmarks/device/sched_profile.py LLAMA_CPP_DIR

With GGML_SCHED_PROF=1 in its environment, a process (the head) prints when it exits, per backend, where its
scheduler's thread spent each graph: copying the user's inputs (`user`), copying inputs another backend computed
(`from:<backend>`, which waits for that backend, e.g. an RPC worker's reply) and launching the backend's part
(`launch`), one line each: `sched-prof CUDA0 from:RPC0[127.0.0.1:50052] n=193 us=2291.3`. With rpc_profile.py it
says which part of an RPC hop lies on the head. It edits ggml-backend.cpp by its text, with or without the
experiments in `patches/experiments/`; an anchor it does not find is reported, and the tree is left as it was.
"""

# ruff: noqa: E501  (the C++ it inserts is kept on its own lines, as it will read in ggml-backend.cpp)
import sys
from pathlib import Path

PROFILER = r'''
// clusterbook measurement (benchmarks/device/sched_profile.py): GGML_SCHED_PROF=1 sums, per backend, the time the
// scheduler's thread spends copying a split's inputs (the user's; each other backend's) and launching the split
#include <chrono>
#include <map>
#include <mutex>
#include <string>
struct sched_prof {
    bool on = getenv("GGML_SCHED_PROF") != nullptr;
    std::mutex mu;
    std::map<std::string, std::pair<uint64_t, uint64_t>> slots;  // "backend what" -> (count, ns)
    static uint64_t now() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    void add(ggml_backend_t backend, const std::string & what, uint64_t t0) {
        const uint64_t ns = now() - t0;
        std::lock_guard<std::mutex> lock(mu);
        auto & s = slots[std::string(ggml_backend_name(backend)) + " " + what];
        s.first++; s.second += ns;
    }
    ~sched_prof() {
        for (const auto & [key, s] : slots) {
            fprintf(stderr, "sched-prof %s n=%llu us=%.1f\n", key.c_str(), (unsigned long long) s.first, s.second / 1e3);
        }
    }
};
static sched_prof sprof;
// times one input's copy, whichever way its iteration of the loop ends
struct sched_prof_copy {
    ggml_backend_t split, from; bool user; uint64_t t0 = sprof.on ? sched_prof::now() : 0;
    ~sched_prof_copy() {
        if (sprof.on) { sprof.add(split, user ? std::string("user") : "from:" + std::string(ggml_backend_name(from)), t0); }
    }
};

'''

# (anchor, replacement): each anchor replaced once
EDITS = [
    ("static enum ggml_status ggml_backend_sched_compute_splits(ggml_backend_sched_t sched) {",
     PROFILER + "static enum ggml_status ggml_backend_sched_compute_splits(ggml_backend_sched_t sched) {"),
    ("            struct ggml_tensor * input_cpy = tensor_copy(input, split_backend_id, sched->cur_copy);\n",
     "            struct ggml_tensor * input_cpy = tensor_copy(input, split_backend_id, sched->cur_copy);\n"
     "            sched_prof_copy prof_copy {split_backend, input_backend, (input->flags & GGML_TENSOR_FLAG_INPUT) != 0};\n"),
    ("            enum ggml_status ec = ggml_backend_graph_compute_async(split_backend, &split->graph);\n",
     "            const uint64_t t_launch = sprof.on ? sched_prof::now() : 0;\n"
     "            enum ggml_status ec = ggml_backend_graph_compute_async(split_backend, &split->graph);\n"
     "            if (sprof.on) { sprof.add(split_backend, \"launch\", t_launch); }\n"),
]


def instrument(text: str) -> tuple[str, list[str]]:
    """The source with the profiler's hooks, and the anchors not found."""
    missing = [anchor.strip().splitlines()[0] for anchor, _ in EDITS if text.count(anchor) != 1]
    if missing:
        return text, missing
    for anchor, replacement in EDITS:
        text = text.replace(anchor, replacement)
    return text, []


def main(root: str) -> int:
    path = Path(root) / "ggml/src/ggml-backend.cpp"
    text, missing = instrument(path.read_text())
    path.write_text(text)
    for m in missing:
        print(f"sched_profile: not found once, nothing changed: {m}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
