"""The side runs' tests: in a full run, conftest.py hands each group with a lab or clock of its own (the systemd
lab's modules, the SLURM lab's, its twin's, and the unit modules that wait on their own clocks) to a pytest of its
own from the start (side_runs.py); this test waits for them and reports what they found."""

import re
import xml.etree.ElementTree as ET

import pytest

from .conftest import NEEDS_LAB, finished_side_runs

pytestmark = [pytest.mark.lab, NEEDS_LAB]


def test_the_side_runs_pass(request):
    runs = finished_side_runs(request.config)
    if not runs:
        pytest.skip("no side run: the session ran its lab tests itself")
    problems = []
    for run in runs:
        log = (run.folder / "pytest.log").read_text(errors="replace")
        junit = run.folder / "junit.xml"
        cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []
        failed = []
        for case in cases:
            found = [case.find(kind) for kind in ("failure", "error") if case.find(kind) is not None]
            if found:
                failed.append(f"{case.get('name')}: {found[0].get('message', '')[:300]}")
        status = run.process.returncode
        print(f"side run {run.name}: {len(cases)} tests, exit status {status}; its log: {run.folder / 'pytest.log'}")
        print("\n".join(line for line in log.splitlines() if re.match(r"\d+\.\d+s (call|setup|teardown)", line)))
        if status != 0 or not cases or failed:
            problems.append(f"side run {run.name} (exit status {status}):\n" + "\n".join(failed) + "\n" + log[-6000:])
    assert not problems, "\n".join(problems)
