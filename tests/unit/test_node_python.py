"""The Python scripts clusterbook puts on nodes run on the oldest python3 a node has: Rocky 8's is 3.6. No 3.6 is
on these machines, so this is static: the syntax parses as 3.6, and no library call newer than 3.6 is used."""

from __future__ import annotations

import ast

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.render.artifacts import render_artifacts

from .test_on_demand import LINE, SLURM_LAB

NEWER = {  # what 3.7+ added that these scripts would reach for first
    "capture_output": "subprocess.run(capture_output=...) is 3.7: use stdout=subprocess.PIPE",
    "text": "subprocess.run(text=...) is 3.7: use universal_newlines=True",
    "ThreadingHTTPServer": "http.server.ThreadingHTTPServer is 3.7: use socketserver.ThreadingMixIn",
    "fromisoformat": "datetime.fromisoformat is 3.7",
    "breakpoint": "breakpoint() is 3.7",
}


def scripts(tmp_path):
    path = tmp_path / "cluster.yaml"  # every script: the wake service too
    path.write_text(SLURM_LAB.read_text().replace(LINE, "    on_demand: {idle_s: 10}\n" + LINE))
    return {a.path: a.text for a in render_artifacts(load_cluster(path)) if a.kind == "python"}


def test_every_node_script_is_python_3_6(tmp_path):
    found = scripts(tmp_path)
    assert {"/usr/local/sbin/clusterbook-wake", "/usr/local/lib/clusterbook/hold.py",
            "/usr/local/lib/clusterbook/hold_streams.py",
            "/usr/local/sbin/clusterbook-tier-probe", "/usr/local/sbin/clusterbook-gguf-check",
            "/usr/local/sbin/clusterbook-legacy"} <= set(found)
    for path, text in found.items():
        tree = ast.parse(text, feature_version=(3, 6))
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
               {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword)} | \
               {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        newer = [why for name, why in NEWER.items() if name in used]
        assert not newer, f"{path}: {newer}"
        assert "from __future__ import annotations" not in text, f"{path}: the annotations future is 3.7"


@pytest.mark.parametrize("code", ["subprocess.run(['x'], capture_output=True)", "http.server.ThreadingHTTPServer"])
def test_the_check_catches_a_newer_call(code):
    tree = ast.parse(code)
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
           {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword)}
    assert used & set(NEWER)
