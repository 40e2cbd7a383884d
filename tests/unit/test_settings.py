"""The cluster file and the reports/runs folders come from invoke's configuration: defaults, a runtime file
(`invoke -f`, INVOKE_RUNTIME_CONFIG), the environment (INVOKE_CLUSTERBOOK_*), and the task list follows the
configured cluster; the command line's --cluster and --dry reach every task of the line."""

import os
import subprocess
import sys
from pathlib import Path

from clusterbook.commands import settings

ROOT = Path(__file__).resolve().parents[2]


def invoke_list(*args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_CLUSTERBOOK_")}
    proc = subprocess.run([sys.executable, "-m", "invoke", *args, "--list"], cwd=ROOT, capture_output=True,
                          text=True, env={**clean, **env}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_task_list_follows_the_configured_cluster(tmp_path):
    assert "deploy.reasoning" in invoke_list() and "deploy.chat" not in invoke_list()
    by_env = invoke_list(INVOKE_CLUSTERBOOK_CLUSTER="tests/clusters/ridge.yaml")
    assert "deploy.chat" in by_env and "deploy.deep" in by_env and "deploy.reasoning" not in by_env
    runtime = tmp_path / "invoke.yaml"
    runtime.write_text("clusterbook:\n  cluster: tests/clusters/ridge.yaml\n")
    by_file = invoke_list(INVOKE_RUNTIME_CONFIG=str(runtime))  # invoke's name for a runtime file (as -f FILE)
    assert "deploy.chat" in by_file and "deploy.reasoning" not in by_file


def test_the_task_list_into_a_reader_that_leaves_ends_without_a_traceback():
    """`invoke --list | head`: the reader closes its end before invoke prints (here at once)."""
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "--list"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert err == "", err  # was a BrokenPipeError traceback from invoke's listing


def test_runtime_file_and_environment_override_the_defaults(tmp_path, monkeypatch):
    runtime = tmp_path / "invoke.yaml"
    runtime.write_text(f"clusterbook:\n  reports: {tmp_path / 'r'}\n  runs: {tmp_path / 'runs'}\n")
    monkeypatch.delenv("INVOKE_CLUSTERBOOK_CLUSTER", raising=False)
    values = settings.read_invoke_config(str(runtime))
    assert (values["cluster"], values["reports"], values["runs"]) == \
        ("cluster.yaml", str(tmp_path / "r"), str(tmp_path / "runs"))
    monkeypatch.setenv("INVOKE_CLUSTERBOOK_CLUSTER", "lab/cluster.yaml")
    assert settings.read_invoke_config(str(runtime))["cluster"] == "lab/cluster.yaml"


def test_one_cluster_and_one_dry_count_for_every_task_of_the_command_line():
    # invoke gives a flag to the task it follows; `stop.fast stop.reasoning --cluster lab/...` must not stop
    # the production file's fast tier. unshare --net: nothing could be contacted even if a task ran for real.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_CLUSTERBOOK_")}
    proc = subprocess.run(["unshare", "--net", sys.executable, "-m", "invoke", "stop.fast", "stop.reasoning",
                           "--cluster", "lab/cluster.yaml", "--dry"], cwd=ROOT, capture_output=True, text=True,
                          env={**clean, "COLUMNS": "200"}, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("(dry run: nothing is contacted)") == 2, proc.stdout
    assert "lab1 $ systemctl disable --now llama-fast" in proc.stdout and "vasp" not in proc.stdout
    twice = subprocess.run([sys.executable, "-m", "invoke", "status", "--cluster", "a.yaml", "logs", "--cluster",
                            "b.yaml"], cwd=ROOT, capture_output=True, text=True, env=clean, timeout=60)
    assert twice.returncode == 2 and "--cluster given twice" in twice.stderr, twice.stderr


def test_a_tier_task_runs_the_operation_of_the_file_the_line_names():
    """The task list comes from the configured file (invoke lists tasks before it parses the line); a task runs
    what the file on its line says: beefcake2's fast tier is a SLURM job, the lab's a systemd unit. A tier the
    configured file lacks is reached with deploy.tier --tier NAME; a task the named file lacks says so."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_CLUSTERBOOK_")}

    def dry(*argv):
        return subprocess.run(["unshare", "--net", sys.executable, "-m", "invoke", *argv, "--dry"], cwd=ROOT,
                              capture_output=True, text=True, env={**clean, "COLUMNS": "200"}, timeout=60)

    ridge = dry("deploy.tier", "--tier", "chat", "--cluster", "tests/clusters/ridge.yaml")
    assert ridge.returncode == 0 and "systemctl" in ridge.stdout, ridge.stdout + ridge.stderr
    missing = dry("deploy.gateway", "--cluster", "tests/clusters/mini.yaml")  # a file with no gateway
    assert missing.returncode == 2 and "no task deploy.gateway for tests/clusters/mini.yaml: its tiers are" in \
        missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr

