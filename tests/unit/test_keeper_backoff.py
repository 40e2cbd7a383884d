"""The keeper, rendered for the SLURM lab and run here with fakes of squeue, sbatch, logger and date: a tier whose
jobs keep ending without ever serving is submitted again after 5 s, then 10, 20, ... (never a resubmission every
keeper pass, as a head that cannot bind its NUMA node once caused); a job that served (released when idle,
preempted) is followed at once, and starts the count afresh."""

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
    markers, logs = tmp_path / "markers", tmp_path / "logs"
    markers.mkdir()
    logs.mkdir()
    marker_dir = next(line.split('"')[1].rsplit("/", 1)[0] for line in script.splitlines()
                      if ".wanted\" ] || return 0" in line and line.strip().startswith("[ -e"))
    script = script.replace(marker_dir, str(markers)).replace(c.storage.log_dir, str(logs))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"squeue": "true",  # no pending or running job
             "sbatch": f'echo "$*" >>{tmp_path}/submitted; wc -l <{tmp_path}/submitted',
             "logger": f'echo "$*" >>{tmp_path}/journal',
             "date": f'[ "$1" = +%s ] && cat {tmp_path}/now || exec /bin/date "$@"'}
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    job = next(line.split()[1] for line in script.splitlines() if line.startswith("keep "))
    (markers / f"{job}.wanted").touch()
    path = tmp_path / "keeper"
    path.write_text(script)

    def run(at: int, served: bool = False) -> int:
        """One keeper pass at this time, the last job's log saying it served or not; the submissions so far."""
        sub = tmp_path / "submitted"
        count = len(sub.read_text().splitlines()) if sub.exists() else 0
        if count:  # the last job ran and left its log
            (logs / f"{job}-{count}.log").write_text("reasoning: waiting for /health\n" + (
                "reasoning: healthy; endpoint registered in /cluster/shared/ai/endpoints/reasoning.json\n"
                if served else "reasoning: head ended (exit status 1)\n"))
        (tmp_path / "now").write_text(str(at))
        subprocess.run(["bash", str(path)], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                       capture_output=True, text=True, timeout=30)
        return len(sub.read_text().splitlines()) if sub.exists() else 0

    run.journal = tmp_path / "journal"
    return run


def test_jobs_that_end_without_serving_are_submitted_ever_more_slowly(keeper):
    assert keeper(1000) == 1  # the first submission
    assert keeper(1003) == 1  # it ended without serving: not again within 5 s
    assert keeper(1005) == 2
    assert keeper(1010) == 2  # then 10 s
    assert keeper(1015) == 3
    assert keeper(1030) == 3  # then 20 s
    assert keeper(1035) == 4
    assert "its last 3 job(s) ended without serving" in keeper.journal.read_text()


def test_a_job_that_served_is_followed_at_once_and_starts_the_count_afresh(keeper):
    for at in (1000, 1005, 1015):
        keeper(at)
    assert keeper(1016, served=True) == 4  # released or preempted after serving: at once
    assert keeper(1017) == 4 and keeper(1021) == 5  # and 5 s again after one that did not serve
