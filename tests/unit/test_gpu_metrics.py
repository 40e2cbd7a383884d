"""The GPU collector as rendered for beefcake2's vasp-01, run with bash and fakes of nvidia-smi and journalctl: each
GPU's figures, and the memory the tiers' own processes hold apart from another job's (VASP's) on the same GPU, which
GpuMemoryHigh reads (issue 64: it counted every process, VASP's included)."""

from __future__ import annotations

import os
import subprocess

from clusterbook.model.loader import load_cluster
from clusterbook.pure import layout
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.render.monitoring import GPU_METRICS, alerts

from .edits import ROOT

NVIDIA_SMI = """#!/bin/bash
case "$*" in
  *--query-gpu=index,utilization*) echo "0, 97, 30000, 32768, 61, 210.5";;
  *--query-gpu=index,uuid*) echo "0, GPU-aaaa";;
  *--query-compute-apps*) printf '%s\\n' "GPU-aaaa, /opt/clusterbook/llama.cpp/bin/llama-server, 22000" \\
      "GPU-aaaa, /opt/vasp/bin/vasp_std, 7000" "GPU-aaaa, /opt/clusterbook/llama.cpp/bin/ggml-rpc-server, 500";;
esac
"""


def test_the_tiers_gpu_memory_is_their_processes_alone(tmp_path):
    c = load_cluster(ROOT / "cluster.yaml")
    script = next(a for a in render_artifacts(c) if a.node == "vasp-01" and a.path == layout.path(c, "gpu_metrics"))
    text = script.text.replace(layout.TEXTFILE_DIR, str(tmp_path / "textfile"))
    xid = "#!/bin/bash\necho 'NVRM: Xid (PCI:0000:3b:00): 79'\n"
    for name, body in (("nvidia-smi", NVIDIA_SMI), ("journalctl", xid)):
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o755)
    run = subprocess.run(["bash", "-c", text], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert run.returncode == 0, run.stderr
    out = (tmp_path / "textfile/clusterbook-gpu.prom").read_text()
    assert f'{GPU_METRICS}_memory_used_bytes{{gpu="0"}} {30000 * 2**20}' in out  # every process, VASP's too
    assert f'{GPU_METRICS}_tiers_memory_used_bytes{{gpu="0"}} {22500 * 2**20}' in out  # llama-server + rpc worker
    assert f"{GPU_METRICS}_xid_errors_total 1" in out
    rule = next(r for r in alerts(c) if r["alert"] == "GpuMemoryHigh")
    assert rule["expr"].startswith(f"{GPU_METRICS}_tiers_memory_used_bytes")
