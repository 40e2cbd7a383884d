"""The README's main job (invoke demo) three times from a fresh lab, run by benchmarks/soak.py, each run on a lab of
its own (the lab file with its names and addresses changed), all at once, beside the other tests from the session's
start: each run deploys a fresh lab and verifies every scenario with --disruptive."""

import json
import re

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.packagedata import FEATURES

from .conftest import LAB, NEEDS_LAB, soak_result

pytestmark = [pytest.mark.lab, NEEDS_LAB]


@pytest.fixture(scope="module")
def soak(request):
    """The soak's result: it started with the session (conftest.py), on its own lab."""
    return soak_result(request.config)


def test_the_readme_main_job_passes_three_times_from_a_fresh_lab(soak):
    result, out, work = soak
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["demo_exit"] for r in runs] == [0, 0, 0]
    for run in runs:  # the node restart is timed in its parts; the lab's power-off no longer waits for SIGKILL
        figures = run["resilience"]
        assert next(v for k, v in figures.items() if k.endswith(" power-off s")) < 10, figures
        assert figures["reasoning recovery s"] <= load_cluster(LAB).recovery_level("reasoning").target, figures
    results_page = (work / "site/results/index.html").read_text()
    assert "Verified" in results_page and "soak" in results_page


def test_verify_passes_every_scenario(soak):
    """The soak's first demo ran invoke verify --disruptive on a fresh deployment; its reports say so."""
    result, _, work = soak
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    junit = (work / "reports/verify.junit.xml").read_text()
    assert "<testsuite" in junit
    elapsed = float(re.search(r'<testsuite [^>]*time="([0-9.]+)"', junit).group(1))
    assert elapsed <= 240, f"verify took {elapsed:.0f} s"  # the tier-down alert scenario waits out its window
    summary = (work / "reports/verify-summary.md").read_text()
    assert "| GPUs | GPU utilisation and memory during generation | ⏭️ skipped |" in summary
    assert "no GPU on soak1" in summary
    first = next(line for line in summary.splitlines() if line.startswith("Verified"))  # the counts come first
    assert "passed" in first and "failed" not in first, first
    cucumber = json.loads((work / "reports/verify.cucumber.json").read_text())
    assert len(cucumber) == len(list(FEATURES.glob("*.feature")))  # one entry per feature
