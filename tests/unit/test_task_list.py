"""The per-tier tasks come from the command line's --cluster file (issue 45: `invoke deploy.chat --cluster
tests/clusters/ridge.yaml` answered "No idea what 'deploy.chat' is!"), read from invoke's own parse of its flags in
its own process (issue 68 row 5); a file that does not load is reported at its lines."""

import os
import subprocess
from pathlib import Path

import pytest

from clusterbook.commands.tasklist import command_line_cluster, command_line_operations, unknown_tier_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tokens, found", [  # what invoke leaves of its command line after its own flags
    (["deploy.chat", "--cluster", "r.yaml", "--dry"], "r.yaml"),
    (["deploy.chat", "--cluster=r.yaml"], "r.yaml"),
    (["deploy.chat", "-c", "r.yaml"], "r.yaml"),
    (["-c", "other_tasks", "deploy.chat"], None),  # before a task, -c is invoke's --collection
    (["deploy.chat", "--dry"], None),
    (["--cluster"], None),
])
def test_the_command_lines_cluster_file(tokens, found):
    assert command_line_cluster(tokens) == found


def test_a_tier_of_another_file_is_a_task():
    done = subprocess.run(["unshare", "--net", str(ROOT / ".venv/bin/invoke"), "deploy.chat", "--cluster",
                           "tests/clusters/ridge.yaml", "--dry", "--no-preflight"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Deploy the chat tier (router mode on l1) (dry run: nothing is contacted)" in done.stdout


def invoke(*argv: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_CLUSTERBOOK_")}
    return subprocess.run([str(ROOT / ".venv/bin/invoke"), *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


@pytest.mark.parametrize("argv, lists", [
    (["--list", "--cluster", "tests/clusters/ridge.yaml"], "ridge"),
    (["-l", "--cluster=tests/clusters/ridge.yaml"], "ridge"),
    (["--list"], "beefcake2"),
    (["--list", "deploy"], "beefcake2's deploy tasks"),  # a namespace, as invoke means it
])
def test_a_listing_of_another_file_in_invokes_own_process(argv, lists):
    """invoke parses --list before it loads tasks.py, and reads `--list --cluster F` as a namespace: tasks.py takes
    F back from invoke's parse (no second process) and lists F's tasks."""
    listed = invoke(*argv)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert ("deploy.chat" in listed.stdout) == (lists == "ridge")
    assert ("reasoning" in listed.stdout) == lists.startswith("beefcake2")  # F's tasks only
    assert ("lab.up" in listed.stdout) == (lists in ("ridge", "beefcake2"))
    if lists == "ridge":  # a task of the configured file is not F's: refused naming F's tiers
        other = invoke("deploy.reasoning", "--cluster", "tests/clusters/ridge.yaml", "--dry")
        assert other.returncode == 2 and "no task deploy.reasoning for tests/clusters/ridge.yaml: its tiers are " \
            "chat, deep" in other.stderr, other.stderr


def test_a_task_of_a_file_that_does_not_load_names_its_problems_at_their_lines(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text((ROOT / "tests/clusters/ridge.yaml").read_text().replace("  name: ridge", "  name: 'ri dge'"))
    said = invoke("deploy.chat", "--cluster", str(broken), "--dry")
    assert said.returncode == 2 and f"{broken}:4: cluster.name:" in said.stderr, said.stderr
    configured = invoke("stop.chat", INVOKE_CLUSTERBOOK_CLUSTER=str(broken))
    assert configured.returncode == 2 and f"{broken}:4: cluster.name:" in configured.stderr, configured.stderr
    assert "Traceback" not in said.stderr + configured.stderr


def test_an_unknown_tier_task_names_the_files_tiers():
    ridge = "tests/clusters/ridge.yaml"
    ops = command_line_operations(ridge)
    said = unknown_tier_task(["deploy.nosuch", "--cluster", ridge], ops, ridge)
    assert said.startswith("no task deploy.nosuch for tests/clusters/ridge.yaml: its tiers are chat, deep; "
                           "its deploy tasks: deploy.chat, deploy.deep,")
    assert unknown_tier_task(["deploy.chat", "--cluster", ridge], ops, ridge) is None
    assert unknown_tier_task(["deploy.tier", "--tier", "x"], ops, None) is None
    assert unknown_tier_task(["check", "--cluster", ridge], ops, ridge) is None


def test_list_with_cluster_lists_that_files_tasks_and_an_unknown_one_exits_2():
    """The process itself is under test: invoke parses --list before it loads tasks.py."""
    listed = subprocess.run([str(ROOT / ".venv/bin/invoke"), "--list", "--cluster", "tests/clusters/ridge.yaml"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "deploy.chat" in listed.stdout and "deploy.fast " not in listed.stdout, \
        listed.stdout + listed.stderr
    refused = subprocess.run([str(ROOT / ".venv/bin/invoke"), "stop.nosuch", "--cluster", "tests/clusters/ridge.yaml"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "its tiers are chat, deep" in refused.stderr, refused.stderr
