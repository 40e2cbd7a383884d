"""The SLURM lab's tests, run beside the others: in a full run, conftest.py hands test_slurm.py to a pytest of its
own from the start (the SLURM lab has its own containers), and this test waits for it and reports what it found."""

import re
import xml.etree.ElementTree as ET

import pytest

from .conftest import NEEDS_LAB, side_run_result

pytestmark = [pytest.mark.lab, NEEDS_LAB]


def test_the_slurm_labs_tests_pass_beside_the_others(request):
    result = side_run_result(request.config)
    if result is None:
        pytest.skip("test_slurm.py ran in this session itself (a side run starts only beside other lab tests)")
    status, folder = result
    log = (folder / "pytest.log").read_text(errors="replace")
    junit = folder / "junit.xml"
    cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []
    failed = []
    for case in cases:
        found = [case.find(kind) for kind in ("failure", "error") if case.find(kind) is not None]
        if found:
            failed.append(f"{case.get('name')}: {found[0].get('message', '')[:300]}")
    print(f"side run of test_slurm.py: {len(cases)} tests, exit status {status}; its log: {folder / 'pytest.log'}")
    print("\n".join(line for line in log.splitlines() if re.match(r"\d+\.\d+s (call|setup|teardown)", line)))
    assert status == 0 and cases and not failed, "\n".join(failed) + "\n" + log[-6000:]
