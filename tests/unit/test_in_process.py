"""Tasks and pytest sessions in this process (effects/in_process.py): deadlines that nest, a hung session stopped
with its reports written, a task run inside a command line that leaves the command line running."""

import signal
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from clusterbook.adapters import command_line
from clusterbook.adapters.tasks import program
from clusterbook.effects.in_process import TIMED_OUT, run_pytest, within

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_within_its_deadline_gives_its_result_and_one_past_it_is_stopped():
    assert within(5, "quick", lambda: 42) == (True, 42)
    started = time.monotonic()
    assert within(0.2, "slow", lambda: time.sleep(5)) == (False, None)
    assert time.monotonic() - started < 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left set


def test_an_inner_deadline_gives_the_outer_one_its_remaining_time_back():
    def outer():
        assert within(0.1, "inner", lambda: time.sleep(5)) == (False, None)  # the inner one fires first
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left < 1.0  # the outer's, less what the inner run took
        time.sleep(5)  # the outer one then fires here
    started = time.monotonic()
    assert within(1.0, "outer", outer) == (False, None)
    assert time.monotonic() - started < 3


def test_an_outer_deadline_due_first_ends_an_inner_run_that_swallows_interruptions():
    def swallowing():
        try:
            time.sleep(5)
        except KeyboardInterrupt:  # as pytest takes Ctrl-C: the session ends, the run goes on
            return "interrupted"
    assert within(0.2, "outer", lambda: within(10, "inner", swallowing)) == (False, None)


@pytest.fixture
def scenarios(tmp_path):
    (tmp_path / f"test_{tmp_path.name}.py").write_text(  # a module name of its own: they stay imported
        textwrap.dedent("""
        import time

        def test_quick():
            print("quick ran")

        def test_hangs():
            time.sleep(60)
    """))
    return tmp_path


def test_a_pytest_session_runs_in_this_process_captured_and_again_as_apply_runs_it(scenarios):
    for _ in range(2):  # before and after a change: the second session finds the modules the first imported
        run = run_pytest([str(scenarios), "-p", "no:cacheprovider", "-q", "-k", "quick"], quiet=True, timeout=30)
        assert (run.status, run.timed_out) == (0, False) and "1 passed" in run.output, run.output


def test_a_hung_session_is_stopped_at_its_deadline_with_its_reports_written(scenarios):
    junit = scenarios / "junit.xml"
    started = time.monotonic()
    run = run_pytest([str(scenarios), "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"], quiet=True, timeout=2)
    assert run.timed_out and run.status == TIMED_OUT and time.monotonic() - started < 20, run.output
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert names == ["test_quick", None], names  # what ran before the hang, and the stopped one without a name


def test_a_task_run_inside_a_command_line_returns_its_status_and_leaves_the_line_running(monkeypatch):
    monkeypatch.setattr(command_line, "COMMAND", [True])  # as in the `clusterbook` command's own process
    assert command_line.invoked_from_command_line()
    lab = str(ROOT / "lab/cluster.yaml")
    run = command_line.run_line(program, ["clusterbook", "plan", "--cluster", lab], timeout=60)
    assert run.returncode == 0 and "reasoning" in run.stdout, run.stderr  # a command line would have exited here
    bad = sorted((ROOT / "tests/invalid").glob("*.yaml"))[0]
    run = command_line.run_line(program, ["clusterbook", "check", "--cluster", str(bad)], timeout=60)
    assert run.returncode == 2 and f"{bad}:" in run.stderr
    assert command_line.invoked_from_command_line() and not command_line.NESTED


def acceptance_folder(tmp_path):
    """A stand-in for the package's acceptance folder: a conftest that takes the options run_scenarios passes."""
    features = tmp_path / "acceptance"
    features.mkdir()
    (features / "conftest.py").write_text(textwrap.dedent("""
        def pytest_addoption(parser):
            for name in ("--live-cluster", "--verify-summary", "--tier"):
                parser.addoption(name)
    """))
    return features


def test_a_phase_whose_scenarios_hang_fails_at_its_deadline_so_apply_rolls_it_back(tmp_path, monkeypatch):
    from clusterbook.effects import scenario_run
    from clusterbook.pure.phases import Phase

    features = acceptance_folder(tmp_path)
    (features / "test_phase_scenarios.py").write_text(textwrap.dedent("""
        import time
        import pytest

        @pytest.mark.tier
        def test_answers():
            pass

        @pytest.mark.tier
        def test_hangs():
            time.sleep(60)
    """))
    monkeypatch.setattr(scenario_run.packagedata, "ACCEPTANCE", features)
    monkeypatch.setattr(scenario_run, "SCENARIOS_DEADLINE_S", 2)
    started = time.monotonic()
    run = scenario_run.run_scenarios("lab/cluster.yaml", Phase("fast", "deploy-fast", tier="fast", scenarios="tier"),
                                     "after", tmp_path, names={"test_answers": "it answers"})
    assert time.monotonic() - started < 20
    assert run.passed == ["it answers"] and not run.ok, run
    assert run.failed and "ran past 2 s and were stopped" in run.failed[0], run.failed


def test_a_failed_scenario_says_what_failed_beside_its_name(tmp_path, monkeypatch):
    """CI once: apply said only "reasoning fails its scenarios before the change (Every tier is healthy and lists its
    models)"; the reason the scenario gave is what the operator needs."""
    from clusterbook.effects import scenario_run
    from clusterbook.pure.phases import Phase

    features = acceptance_folder(tmp_path)  # its test module's name is its own: one process imports both tests'
    (features / "test_failing_scenario.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.tier
        def test_healthy():
            assert False, "tier reasoning: /health answered 503\\n  Loading model"
    """))
    monkeypatch.setattr(scenario_run.packagedata, "ACCEPTANCE", features)
    run = scenario_run.run_scenarios("lab/cluster.yaml", Phase("fast", "deploy-fast", tier="fast", scenarios="tier"),
                                     "before", tmp_path, names={"test_healthy": "Every tier is healthy"})
    assert len(run.failed) == 1 and run.failed[0].startswith("Every tier is healthy: "), run.failed
    assert "tier reasoning: /health answered 503 Loading model" in run.failed[0], run.failed
