"""--dry prints the whole plan for the production cluster and contacts nothing (ssh is never started)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stubbed(tmp_path) -> tuple[Path, dict]:
    """ssh, curl and scp stubs that record each call in the returned file, and the environment that runs them."""
    calls = tmp_path / "ssh-calls"
    stub = tmp_path / "bin"
    stub.mkdir()
    for tool in ("ssh", "curl", "scp"):
        (stub / tool).write_text(f"#!/bin/sh\necho \"$0 $*\" >> {calls}\nexit 1\n")
        (stub / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "COLUMNS": "250"}
    env.pop("INVOKE_CLUSTERBOOK_CLUSTER", None)
    return calls, env


def offline(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """invoke with the network unshared and ssh, curl and scp stubbed; fails the test if any of them was run."""
    calls, env = stubbed(tmp_path)
    proc = subprocess.run(["unshare", "--net", sys.executable, "-m", "invoke", *argv], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not calls.exists(), calls.read_text()
    return proc


def test_dry_run_of_production_contacts_nothing(tmp_path):
    proc = offline(tmp_path, "models.fetch", "--dry", "deploy.reasoning", "--dry", "deploy.fast", "--dry",
                   "stop.reasoning", "--dry")
    out = proc.stdout
    assert "dry run: nothing is contacted" in out
    # production's tiers run under SLURM (seed 004): deploy submits the rendered batch scripts on slurm-ctl
    for expected in ("Deploy the reasoning tier as SLURM job llama-reasoning", "vasp-03 put /etc/llama/reasoning.env",
                     "slurm-ctl put /etc/llama/slurm/llama-reasoning.sbatch",
                     "/usr/local/sbin/clusterbook-jobs submit reasoning",
                     "Deploy the fast tier as SLURM job llama-fast", "clusterbook-jobs cancel reasoning --wait",
                     "curl -fsSL --proto-redir =https --retry 3 -C - -o OR1-Behemoth.Q4_K_M.gguf.part1"):
        assert expected in out, expected
    # issue 64: a job name is anyone's; the tiers' jobs are found and cancelled by recorded id and user only
    for by_name in ("scancel -n", "squeue -h -n", "squeue -n"):
        assert by_name not in out, by_name


def test_dry_run_shows_a_diff_when_the_last_upload_is_known(tmp_path):
    from clusterbook.effects.console import console
    from clusterbook.effects.reporters import dry_run
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.runbooks import available, expand

    cluster = load_cluster(ROOT / "lab/cluster.yaml")  # systemd tiers: the head's unit
    expansion = expand(available()["deploy-rpc"], cluster, "reasoning", steps=["head"])
    put = expansion.steps[0].hosts["lab1"][0]
    known = tmp_path / "lab1" / put.path.lstrip("/")
    known.parent.mkdir(parents=True)
    known.write_text(put.content.replace("--ctx-size 2048", "--ctx-size 4096"))
    with console.capture() as captured:
        dry_run(expansion, tmp_path)
    text = captured.get()
    assert "-    --ctx-size 4096 \\" in text and "+    --ctx-size 2048 \\" in text


def test_dry_run_summarises_a_diff_too_long_to_read(tmp_path):
    """docs.publish uploads the packed site as one long line: --dry says it changed instead of printing it."""
    from clusterbook.commands.docs_inputs import packed_site
    from clusterbook.effects.console import console
    from clusterbook.effects.reporters import dry_run
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.artifacts import render_artifacts
    from clusterbook.pure.runbooks import available, expand

    cluster = load_cluster(ROOT / "cluster.yaml")
    site = packed_site(cluster, "A" * 50_000)
    expansion = expand(available()["publish-docs"], cluster, variables={"build_id": "now"},
                       artifacts=render_artifacts(cluster) + [site])
    known = tmp_path / "slurm-ctl" / site.path.lstrip("/")
    known.parent.mkdir(parents=True)
    known.write_text("B" * 50_000)
    with console.capture() as captured:
        dry_run(expansion, tmp_path)
    text = captured.get()
    assert "diff lines, too long to show)" in text and "AAAA" not in text
    assert "curl -sf http://127.0.0.1:8082/ | grep -q now" in text


def test_apply_dry_on_production_lists_the_change_per_node_and_contacts_nothing(tmp_path):
    proc = offline(tmp_path, "apply", "--dry")
    out = proc.stdout
    assert "--dry contacts no node" in out and "Nothing was contacted or changed" in out
    expected = (("engine", "vasp-03", "engine link"), ("reasoning", "slurm-ctl", "llama-reasoning.sbatch"),
                ("router", "vasp-01", "llama-model-selector"), ("monitoring", "slurm-ctl", "prometheus.yml"))
    for phase, node, what in expected:
        assert any(phase in ln and node in ln and what in ln for ln in out.splitlines()), (phase, node, what)


def test_rollback_dry_on_production_says_what_it_would_read_and_contacts_nothing(tmp_path):
    proc = offline(tmp_path, "rollback", "--tier", "reasoning", "--dry")
    out = " ".join(proc.stdout.split())
    assert "would read the generations in /var/lib/clusterbook/generations on" in out, out
    assert "vasp-01" in out and "Nothing was contacted or changed" in out, out


def tasks_with_dry() -> list[str]:
    """Every task of tasks.py (for beefcake2's file) that takes --dry, as invoke names it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cb_tasks_dry", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = []

    def walk(collection, prefix=""):
        for name, task in collection.tasks.items():
            if any(arg.name == "dry" for arg in task.get_arguments()):
                found.append(prefix + name)
        for name, sub in collection.collections.items():
            walk(sub, f"{prefix}{name}.")

    walk(module.ns)
    return sorted(found)


DRY_TASKS = tasks_with_dry()


def test_the_list_of_dry_tasks_is_the_whole_list():
    assert {"apply", "rollback", "status", "logs", "docs.publish", "deploy.install", "models.fetch"} <= set(DRY_TASKS)
    assert len(DRY_TASKS) >= 15


@pytest.mark.parametrize("task", DRY_TASKS)
def test_every_dry_task_runs_offline_on_production(tmp_path, task):
    """Issue 29: `--dry` never connects, for any task, on beefcake2's file (network unshared, ssh/curl/scp stubs
    that fail the test when run)."""
    extra = ["--tier", "reasoning"] if task.endswith(".tier") else []
    proc = offline(tmp_path, task, "--dry", *extra)
    assert proc.stdout.strip(), task


@pytest.mark.parametrize("argv", [["bench.recovery"], ["verify"], ["lab.up"], ["demo"], ["preflight"], ["fabric"],
                                  ["models.hash"], ["bench.run"]])
def test_a_task_without_a_dry_run_refuses_dry_and_contacts_nothing(tmp_path, argv):
    """invoke reads --dry as its own flag, which does not stop a task from connecting: a task with no dry mode
    must refuse it (exit 2), not run for real."""
    calls, env = stubbed(tmp_path)
    proc = subprocess.run(["unshare", "--net", sys.executable, "-m", "invoke", *argv, "--dry"], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert f"invoke {argv[0]} has no dry run" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not calls.exists(), calls.read_text()


def test_a_task_that_contacts_nothing_still_runs_with_dry(tmp_path):
    proc = offline(tmp_path, "render", "--dry", "--out", str(tmp_path / "build"))
    assert (tmp_path / "build/slurm-ctl/etc/llama/slurm/llama-reasoning.sbatch").exists(), proc.stdout


def test_two_runs_started_in_one_second_keep_a_log_each(tmp_path):
    """Two runs of one runbook started within a second wrote their lines into one run log (second resolution)."""
    import re
    import time

    from clusterbook.effects.reporters import run_log_path
    first = run_log_path(tmp_path, "lab", "deploy-rpc-reasoning")
    time.sleep(0.002)
    second = run_log_path(tmp_path, "lab", "deploy-rpc-reasoning")
    assert first != second and sorted([second, first]) == [first, second]  # the names sort as the runs began
    assert re.fullmatch(r"\d{8}T\d{6}\.\d{3}Z-lab-deploy-rpc-reasoning\.jsonl", first.name), first.name
