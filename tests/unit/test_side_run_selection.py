"""A session that deselects the lab tests (-m "not lab", -k) starts no side run: the hand-over sees the tests the
session still runs (tests/lab/side_runs.py), so a unit run never boots a lab."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_without_the_lab_tests_starts_no_side_run(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where a side run would make its folder
    env.pop("CLUSTERBOOK_LAB_SIDE_RUN", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not lab", "-k",
                          "without_a_tier_on_demand or side_runs", "tests/unit/test_on_demand.py",
                          "tests/lab/test_side_runs.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout, run.stdout[-1000:]  # the unit test ran here, the lab's waiter deselected
    assert not list(tmp_path.glob("clusterbook-side-*")), "a side run started"
