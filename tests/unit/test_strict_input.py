"""The cluster file's strict subset: every YAML construct is a value or a problem at a line (never a traceback),
tier names cannot shadow a task, a bad file never breaks `invoke --list`, and the destructive shell stays in its
folder."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterbook.model.problems import InputError
from clusterbook.model.schema import RESERVED_TIER_NAMES
from clusterbook.model.yamlsource import parse_yaml
from clusterbook.pure import generations as gen

ROOT = Path(__file__).resolve().parents[2]

YAML_CONSTRUCTS = {  # text -> the value it must read as, or None: refused with a line
    "a: 12": 12, "a: -3": -3, "a: 1.5": 1.5, "a: 'x'": "x", "a: [1, 2]": [1, 2], "a: {b: c}": {"b": "c"},
    "a: null": None, "a: true": True, "a: 1.0e400": "1.0e400",  # YAML 1.1 reads that one as text
    "a: 026": None, "a: 0o26": "0o26", "a: 0x1A": None, "a: 0b101": None, "a: 1_000": None, "a: 1:20": None,
    "a: 1:20.5": None, "a: .inf": None, "a: -.inf": None, "a: .nan": None, "a: 1.0e+400": None,
    "a: !foo x": None, "a: !!str 1": None, "a: !!binary aGk=": None, "a: !!python/object:os.system {}": None,
    "a: !!set {x}": None, "a: !!omap [{x: 1}]": None, "x: 1\n<<: {a: 1}": None, "? [a]\n: 1": None,
    "a: 2026-13-45": None, "a: x\x00": None, "a: 1\nb: \u2028x": None, "a: x\x85": None, "a: x\x1b": None,
    "a: &x [1]\nb: *x": [1],
}


@pytest.mark.parametrize("text", list(YAML_CONSTRUCTS), ids=repr)
def test_every_yaml_construct_is_a_value_or_a_problem_at_a_line(text):
    expected = YAML_CONSTRUCTS[text]
    if expected is None and not text.startswith("a: null"):
        with pytest.raises(InputError) as err:
            parse_yaml(text, "f.yaml")
        assert all(p.line for p in err.value.problems), [str(p) for p in err.value.problems]
    else:
        assert parse_yaml(text, "f.yaml").data["a"] == expected


def test_a_line_separator_does_not_shift_the_lines_after_it():
    with pytest.raises(InputError) as err:
        parse_yaml("a: 1\nb: x\u2028y\nc: 3\n", "f.yaml")
    assert [p.line for p in err.value.problems] == [2]


def _invoke_names() -> set[str]:
    spec = importlib.util.spec_from_file_location("cb_tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = set()
    for collection in [module.ns, *module.ns.collections.values()]:
        names |= set(collection.tasks) | set(collection.collections)
    return names


def test_every_built_in_task_and_collection_name_is_reserved_for_tiers():
    tiers = {"reasoning", "fast"}  # beefcake2's own tiers, which its tasks name
    builtin = {n for n in _invoke_names() if n not in tiers and not n.endswith("-workers")}
    assert builtin <= RESERVED_TIER_NAMES, sorted(builtin - RESERVED_TIER_NAMES)


@pytest.mark.parametrize("name", ["tier-name-dot", "tier-name-task", "yaml-tag-python"])
def test_a_bad_cluster_file_never_breaks_the_task_list(name):
    env = {**os.environ, "INVOKE_CLUSTERBOOK_CLUSTER": f"tests/invalid/{name}.yaml"}
    listed = subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=ROOT, capture_output=True, text=True,
                            env=env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "check" in listed.stdout and "deploy.install" in listed.stdout


def test_the_prune_removes_only_generation_folders(tmp_path):
    gdir = tmp_path / "generations"
    names = [f"2026010{i}T000000.000000Z-deploy-rpc-reasoning" for i in range(1, 6)]
    for name in [*names, "etc", "precious", "20260101-not-a-generation"]:
        (gdir / name).mkdir(parents=True)
    gid = names[-1]
    (gdir / gid / "files").mkdir()
    (gdir / gid / "files" / "x").write_text("kept")  # the newest changed something: it stays
    (gdir / gid / "engine_before").write_text("")
    subprocess.run(["bash", "-c", gen.end_command(str(gdir), gid, str(tmp_path / "bin"), kept=2)], check=True)
    assert sorted(p.name for p in gdir.iterdir()) == sorted([*names[-2:], "etc", "precious",
                                                            "20260101-not-a-generation"])

