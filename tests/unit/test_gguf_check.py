"""The GGUF header check models.fetch runs on each node (clusterbook/node/gguf_check.py), against a tiny model the
lab's generator writes: a header that matches passes; one that contradicts the cluster file names each field, both
figures and the header's key; a file that is not GGUF is refused. (Issue 68 row 6: it was Python in a template.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import clusterbook.node
from clusterbook.effects.lab.models import TinyModel, write_model

PROGRAM = Path(clusterbook.node.__file__).parent / "gguf_check.py"


def check(path, **expected):
    return subprocess.run([sys.executable, str(PROGRAM), str(path), *(f"{k}={v}" for k, v in expected.items())],
                          capture_output=True, text=True)


def test_a_header_that_matches_passes_and_one_that_does_not_names_each_field(tmp_path):
    model = write_model(TinyModel("t", layers=3, embedding=64, heads=4, kv_heads=2, feed_forward=128, seed=3),
                        tmp_path / "t.gguf")
    good = check(model, layers=3, heads=4, kv_heads=2, embedding=64)
    assert good.returncode == 0 and "header matches (layers=3, heads=4, kv_heads=2, embedding=64)" in good.stdout
    bad = check(model, layers=80, kv_heads=8)
    assert bad.returncode != 0
    assert "layers: the cluster file says 80, the header (llama.block_count) says 3" in bad.stderr
    assert "kv_heads: the cluster file says 8, the header (llama.attention.head_count_kv) says 2" in bad.stderr


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"<html>404</html>")
    done = check(tmp_path / "x.gguf", layers=3)
    assert done.returncode != 0 and "not a GGUF file" in done.stderr
