"""Every file in tests/invalid/ fails with the FILE:LINE: field: message its first line expects, exit status 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterbook.commands.cluster import checked_cluster
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError

ROOT = Path(__file__).resolve().parents[2]
INVALID = sorted((ROOT / "tests/invalid").glob("*.yaml"))


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: LINE: field: message'"
    return first[len("# expect: "):]


def test_enough_cases():
    assert len(INVALID) >= 60


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_problem_names_file_line_and_field(path):
    with pytest.raises(InputError) as err:
        checked_cluster(str(path))
    messages = [str(p) for p in err.value.problems]
    want = f"{path}:{expected(path)}"
    assert any(m.startswith(want) for m in messages), f"expected\n  {want}\ngot\n  " + "\n  ".join(messages)


@pytest.mark.parametrize("path", INVALID[:4] + INVALID[-4:], ids=lambda p: p.stem)
def test_cli_exits_2_without_traceback(path):
    proc = subprocess.run([sys.executable, "-m", "invoke", "check", "--cluster", str(path)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}:{expected(path)}" in proc.stderr
    assert "nothing was changed" in proc.stderr


def test_every_schema_problem_is_reported_at_once(tmp_path):
    text = (ROOT / "tests/clusters/mini.yaml").read_text()
    broken = text.replace("hostname: n1", "hostnme: n1").replace("cpu_cores: 8\n    ram_gb: 64\n  - name: n2",
                                                                  "cpu_cores: eight\n    ram_gb: 64\n  - name: n2")
    f = tmp_path / "two.yaml"
    f.write_text(broken)
    with pytest.raises(InputError) as err:
        load_cluster(f)
    found = [str(p) for p in err.value.problems]
    assert any("nodes[n1].hostnme: unknown key" in p for p in found), found  # two unrelated mistakes of one node,
    assert any("nodes[n1].cpu_cores" in p for p in found), found  # each with its own line, in one report


def test_every_cross_field_problem_is_reported_at_once(tmp_path):
    """Cross-field rules run on a schema-valid file (they need its meaning); then all of them are reported."""
    text = (ROOT / "tests/clusters/mini.yaml").read_text()
    broken = text.replace("workers: [n2]", "workers: [n9]").replace("head: n1", "head: n7")
    f = tmp_path / "two.yaml"
    f.write_text(broken)
    with pytest.raises(InputError) as err:
        load_cluster(f)
    found = [str(p) for p in err.value.problems]
    assert any("tiers[big].head: unknown node 'n7'" in p for p in found), found
    assert any("tiers[big].workers[0]: unknown node 'n9'" in p for p in found), found


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as err:
        load_cluster(tmp_path / "nope.yaml")
    assert "cannot read file" in str(err.value)


def test_duplicate_yaml_key(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("cluster:\n  name: a\n  name: b\n")
    with pytest.raises(InputError) as err:
        load_cluster(f)
    assert f"{f}:3: cluster.name: duplicate key 'name' (first at line 2)" in str(err.value)


def test_a_route_that_continues_no_stream_may_serve_a_model_whose_template_cannot_prefill(tmp_path):
    text = (ROOT / "tests/invalid/gateway-continue-without-prefill.yaml").read_text()
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace("port: 9081}", "port: 9081, continue_streams: false}"))
    assert checked_cluster(str(path)).gateway.routes[0].continue_streams is False
