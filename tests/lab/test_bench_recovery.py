"""`invoke bench.recovery` on the lab: a killed worker and a restarted head, warm and cold page cache; every phase
is read from the nodes' journals in the order it happens, and the report lands stamped with the lab's file."""

import json

import pytest

from clusterbook.commands.reportstamp import report_for

from .conftest import LAB, NEEDS_LAB, ROOT, invoke

pytestmark = [pytest.mark.lab, NEEDS_LAB]

WORKER_KILLED = ["head aborted", "worker back", "head started", "loading", "model loaded", "first answer"]
HEAD_RESTARTED = ["head started", "loading", "model loaded", "first answer"]


@pytest.fixture(scope="module")
def deployed():
    up = invoke("lab.up")
    assert up.returncode == 0, up.stderr
    run = invoke("deploy.install", "models.fetch", "deploy.reasoning")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr


def test_bench_recovery_times_every_phase(deployed, tmp_path):
    run = invoke("bench.recovery", "--runs", "1", "--cold",
                 extra_env={"INVOKE_CLUSTERBOOK_REPORTS": str(tmp_path)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    report = json.loads((tmp_path / "bench-recovery.json").read_text())
    assert report["card"] == "CPU only (3 nodes)" and report["predicted"]["load_s"] > 0
    assert [(r["case"], r["page_cache"]) for r in report["runs"]] == [
        ("worker killed", "warm"), ("worker killed", "cold"), ("head restarted", "warm"), ("head restarted", "cold")]
    for r in report["runs"]:
        expected = WORKER_KILLED if r["case"] == "worker killed" else HEAD_RESTARTED
        assert sorted(r["phases"], key=r["phases"].get) == expected, r
        assert r["load_s"] > 0 and r["clients_saw"]["200"] == 1, r
        if r["page_cache"] == "cold":  # the evictor dropped the file once the old head had let go of it
            assert r["resident_after_eviction"] is not None and r["resident_after_eviction"] < 0.05, r
    text, why = report_for((tmp_path / "bench-recovery-summary.md").read_text(), "lab", ROOT / LAB)
    assert text is not None, why
    assert "| worker killed | cold | 1 |" in text
