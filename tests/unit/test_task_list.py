"""The per-tier tasks come from the command line's --cluster file (issue 45: `invoke deploy.chat --cluster
tests/clusters/ridge.yaml` answered "No idea what 'deploy.chat' is!")."""

import subprocess
from pathlib import Path

import pytest

from clusterbook.commands.tasklist import (
    command_line_cluster,
    command_line_operations,
    listing_cluster,
    unknown_tier_task,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, found", [
    (["invoke", "deploy.chat", "--cluster", "r.yaml", "--dry"], "r.yaml"),
    (["invoke", "deploy.chat", "--cluster=r.yaml"], "r.yaml"),
    (["invoke", "deploy.chat", "-c", "r.yaml"], "r.yaml"),
    (["invoke", "-c", "other_tasks", "deploy.chat"], None),  # before a task, -c is invoke's --collection
    (["invoke", "deploy.chat", "--dry"], None),
    (["invoke", "--cluster"], None),
])
def test_the_command_lines_cluster_file(argv, found):
    assert command_line_cluster(argv) == found


def test_a_tier_of_another_file_is_a_task():
    done = subprocess.run(["unshare", "--net", str(ROOT / ".venv/bin/invoke"), "deploy.chat", "--cluster",
                           "tests/clusters/ridge.yaml", "--dry", "--no-preflight"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Deploy the chat tier (router mode on l1) (dry run: nothing is contacted)" in done.stdout


@pytest.mark.parametrize("argv, found", [
    (["invoke", "--list", "--cluster", "r.yaml"], "r.yaml"),
    (["invoke", "-l", "--cluster=r.yaml"], "r.yaml"),
    (["invoke", "--list"], None),
    (["invoke", "--list", "deploy"], None),  # a namespace, as invoke means it
    (["invoke", "deploy.chat", "--cluster", "r.yaml"], None),
])
def test_a_listing_of_another_file(argv, found):
    assert listing_cluster(argv) == found


def test_an_unknown_tier_task_names_the_files_tiers():
    ops = command_line_operations(["invoke", "deploy.nosuch", "--cluster", "tests/clusters/ridge.yaml"])
    said = unknown_tier_task(["invoke", "deploy.nosuch", "--cluster", "tests/clusters/ridge.yaml"], ops)
    assert said.startswith("no task deploy.nosuch for tests/clusters/ridge.yaml: its tiers are chat, deep; "
                           "its deploy tasks: deploy.chat, deploy.deep,")
    assert unknown_tier_task(["invoke", "deploy.chat", "--cluster", "tests/clusters/ridge.yaml"], ops) is None
    assert unknown_tier_task(["invoke", "deploy.tier", "--tier", "x"], ops) is None
    assert unknown_tier_task(["invoke", "check", "--cluster", "tests/clusters/ridge.yaml"], ops) is None


def test_list_with_cluster_lists_that_files_tasks_and_an_unknown_one_exits_2():
    """The process itself is under test: invoke parses --list before it loads tasks.py."""
    listed = subprocess.run([str(ROOT / ".venv/bin/invoke"), "--list", "--cluster", "tests/clusters/ridge.yaml"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "deploy.chat" in listed.stdout and "deploy.fast " not in listed.stdout, \
        listed.stdout + listed.stderr
    refused = subprocess.run([str(ROOT / ".venv/bin/invoke"), "stop.nosuch", "--cluster", "tests/clusters/ridge.yaml"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "its tiers are chat, deep" in refused.stderr, refused.stderr
