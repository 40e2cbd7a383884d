"""The rendered llama-model-selector, run with bash: every task maps to its model and endpoint."""

import json
import subprocess

import pytest

from clusterbook.effects.files import write_tree
from clusterbook.pure.render.artifacts import render_artifacts, selector_rows


@pytest.fixture
def selector(tmp_path, request):
    cluster = request.getfixturevalue(request.param)
    write_tree(render_artifacts(cluster), tmp_path)
    script = next(tmp_path.glob("*/usr/local/bin/llama-model-selector"))
    return cluster, lambda *args: subprocess.run(["bash", str(script), *args], capture_output=True, text=True)


@pytest.mark.parametrize("selector", ["beefcake2", "ridge"], indirect=True)
def test_every_task_maps_to_its_model_and_endpoint(selector):
    cluster, run = selector
    rows = selector_rows(cluster)
    assert rows
    for row in rows:
        proc = run("--json", row["task"])
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == row
        env = dict(line.split("=", 1) for line in run(row["task"]).stdout.split())
        assert env == {"LLAMA_TASK": row["task"], "LLAMA_MODEL": row["model"], "LLAMA_TIER": row["tier"],
                       "LLAMA_ENDPOINT": row["endpoint"]}


@pytest.mark.parametrize("selector", ["beefcake2"], indirect=True)
def test_refactor_goes_to_the_reasoning_model(selector):
    _, run = selector
    assert json.loads(run("--json", "refactor").stdout)["model"] == "OR1-Behemoth"
    assert json.loads(run("--json", "idiomatic").stdout)["model"] == "strand-rust-coder-14b-q8_0"


@pytest.mark.parametrize("selector", ["beefcake2"], indirect=True)
def test_unknown_task_gets_default_with_a_note(selector):
    _, run = selector
    proc = run("--json", "poetry")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["model"] == "OR1-Behemoth"
    assert "unknown task 'poetry'" in proc.stderr


@pytest.mark.parametrize("selector", ["ridge"], indirect=True)
def test_unknown_task_without_default_exits_2_listing_tasks(selector):
    _, run = selector
    proc = run("poetry")
    assert proc.returncode == 2
    assert "known tasks: chat summarize code review plan" in proc.stderr


@pytest.mark.parametrize("selector", ["beefcake2", "ridge"], indirect=True)
def test_list_json_is_the_whole_table(selector):
    cluster, run = selector
    assert json.loads(run("--list", "--json").stdout) == selector_rows(cluster)
    assert len(run("--list").stdout.splitlines()) == len(selector_rows(cluster))
    assert run("--help").returncode == 0


@pytest.mark.parametrize("selector", ["beefcake2"], indirect=True)
def test_every_endpoint_is_the_gateways_so_each_request_gets_the_hold_and_the_wake(selector):
    """Issue 67 row 6: the selector sent clients straight to the nodes (ENDPOINTS=(http://10.0.0.31:8081 …)), past
    the hold, the queue and the wake of a tier on demand, and wrong once a SLURM tier moved."""
    cluster, run = selector
    nodes = [address for n in cluster.nodes for address in n.addresses.values()]
    for row in json.loads(run("--list", "--json").stdout):
        assert row["endpoint"].startswith(cluster.gateway.url), row
        assert not any(address in row["endpoint"] for address in nodes), row
