"""The in-process runner (tests/inprocess.py) reads a task's exit status and output as a shell would."""

from pathlib import Path

from tests.inprocess import run_invoke

ROOT = Path(__file__).resolve().parents[2]


def test_bad_input_exits_2_and_names_the_line():
    bad = sorted((ROOT / "tests/invalid").glob("*.yaml"))[0]
    run = run_invoke("check", "--cluster", str(bad))
    assert run.returncode == 2 and f"{bad}:" in run.stderr and "Traceback" not in run.stderr


def test_a_task_that_passes_exits_0_with_its_output():
    run = run_invoke("plan", "--cluster", "lab/cluster.yaml")
    assert run.returncode == 0 and "reasoning" in run.stdout, run.stderr


def test_an_unknown_task_fails_and_a_slow_one_is_stopped():
    assert run_invoke("no-such-task").returncode == 1
    run = run_invoke("lab.status", "--cluster", "lab/cluster.yaml", timeout=0.001)
    assert run.returncode == 124 and "over its" in run.stderr
