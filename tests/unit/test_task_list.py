"""The per-tier tasks come from the command line's --cluster file (issue 45: `invoke deploy.chat --cluster
tests/clusters/ridge.yaml` answered "No idea what 'deploy.chat' is!")."""

import subprocess
from pathlib import Path

import pytest

from clusterbook.commands.tasklist import command_line_cluster

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
