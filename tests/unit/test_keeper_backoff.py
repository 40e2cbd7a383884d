"""The keeper, rendered for the SLURM lab and run here with fakes of squeue, sbatch, logger and date: a tier whose
jobs keep ending soon after they start is submitted again after 5 s, then 10, 20, ... (never a resubmission every
keeper pass, as a head that cannot bind its NUMA node once caused), and a job that served for a while starts the
count afresh."""

import os
import subprocess
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.render.artifacts import render_artifacts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def keeper(tmp_path):
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    script = next(a for a in render_artifacts(c) if a.path.endswith("clusterbook-keeper")).text
    markers = tmp_path / "markers"
    markers.mkdir()
    marker_dir = next(line.split('"')[1].rsplit("/", 1)[0] for line in script.splitlines()
                      if ".wanted\" ] || return 0" in line and line.strip().startswith("[ -e"))
    script = script.replace(marker_dir, str(markers))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"squeue": "true",  # no pending or running job
             "sbatch": f'echo "$*" >>{tmp_path}/submitted; echo 4242',
             "logger": f'echo "$*" >>{tmp_path}/journal',
             "date": f'[ "$1" = +%s ] && cat {tmp_path}/now || exec /bin/date "$@"'}
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    job = next(line.split()[1] for line in script.splitlines() if line.startswith("keep "))
    (markers / f"{job}.wanted").touch()
    path = tmp_path / "keeper"
    path.write_text(script)

    def run(at: int) -> int:
        """One keeper pass at this time; how many submissions there have been."""
        (tmp_path / "now").write_text(str(at))
        subprocess.run(["bash", str(path)], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                       capture_output=True, text=True, timeout=30)
        sub = tmp_path / "submitted"
        return len(sub.read_text().splitlines()) if sub.exists() else 0

    run.journal = tmp_path / "journal"
    return run


def test_jobs_that_end_at_once_are_submitted_ever_more_slowly(keeper):
    assert keeper(1000) == 1  # the first submission
    assert keeper(1003) == 1  # ended at once: not again within 5 s
    assert keeper(1005) == 2
    assert keeper(1010) == 2  # then 10 s
    assert keeper(1015) == 3
    assert keeper(1030) == 3  # then 20 s
    assert keeper(1035) == 4
    assert "its last 3 job(s) ended within 2 minutes of their submission" in keeper.journal.read_text()


def test_a_job_that_served_a_while_starts_the_count_afresh(keeper):
    for at in (1000, 1005, 1015, 1035):
        keeper(at)
    assert keeper(1035 + 200) == 5  # 200 s later: the last job served, so at once
    assert keeper(1035 + 203) == 5 and keeper(1035 + 205) == 6  # and 5 s again after that
