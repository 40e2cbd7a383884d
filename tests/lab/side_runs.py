"""Side runs: in a full run, each group of lab tests with a lab of its own runs from the start in a pytest of its own,
beside the session's other tests; test_side_runs waits for them at the end and reports what they found.

The groups (issue 69: one after another, the lab tests were the run's last eleven minutes):
- `clocks`: unit modules that mostly wait on their own clocks (real servers on loopback, their timeouts and
  restarts), so they cost the others little beside them (15 CPU-seconds in 130 s alone); they run ahead of the rest,
  as the host's llama.cpp build and root file system do in the same minutes (priority.py), or their waits would
  stretch;
- `lab`: the systemd lab's modules (lab/cluster.yaml);
- `slurm`: test_slurm.py on the SLURM lab (lab/cluster-slurm.yaml);
- `slurm-b`: test_slurm.py's tests marked `second_slurm_lab` (about half its minutes), on a twin of the SLURM lab:
  lab/cluster-slurm.yaml with only its names and addresses changed (cluster lab-slurm-b, nodes slb1-3,
  10.217.0.0/23), written to .clusterbook/lab-slurm-b/cluster-slurm.yaml. Run them on it yourself with
  CLUSTERBOOK_SLURM_LAB=.clusterbook/lab-slurm-b/cluster-slurm.yaml (`slurm_lab_file`).
A session that names lab modules itself (`pytest tests/lab/test_slurm.py`) runs them in its own process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.lab.priority import ahead

ROOT = Path(__file__).resolve().parents[2]
CHILD = "CLUSTERBOOK_LAB_SIDE_RUN"  # set in a side run's environment: it runs its tests itself
SLURM_LAB_FILE = "CLUSTERBOOK_SLURM_LAB"  # which SLURM lab test_slurm.py runs on (default lab/cluster-slurm.yaml)
SLURM_LAB = ROOT / "lab/cluster-slurm.yaml"
TWIN = ROOT / ".clusterbook/lab-slurm-b/cluster-slurm.yaml"
TWIN_NAMES = {r"\bslab([123])\b": r"slb\1", r"\b10\.214\.": "10.217.",  # names and addresses, and no other text
              r"(?m)^  name: lab-slurm$": "  name: lab-slurm-b",
              r"\.clusterbook/lab-slurm/": ".clusterbook/lab-slurm-b/"}
CLOCK_MODULES = ("test_gateway_hold", "test_faults_bench", "test_step_supervisor", "test_hold_hostile",
                 "test_on_demand")
SYSTEMD_LAB_MODULES = ("test_deploy", "test_apply", "test_bench_recovery", "test_planner_accuracy", "test_verify",
                       "test_lab")
WAITER = "test_side_runs"  # the test that waits for the side runs: a session that selects it starts them


@dataclass
class SideRun:
    name: str
    process: subprocess.Popen
    folder: Path  # its pytest.log, junit.xml and reports/


def slurm_lab_file() -> Path:
    """The SLURM lab test_slurm.py runs on: lab/cluster-slurm.yaml, or the one a side run names."""
    return ROOT / os.environ[SLURM_LAB_FILE] if os.environ.get(SLURM_LAB_FILE) else SLURM_LAB  # relative: to ROOT


def write_twin() -> Path:
    """The SLURM lab's twin file (see above), written again from lab/cluster-slurm.yaml: its path."""
    text = SLURM_LAB.read_text()
    for pattern, new in TWIN_NAMES.items():
        text, count = re.subn(pattern, new, text)
        assert count, f"lab/cluster-slurm.yaml no longer has {pattern}: update tests/lab/side_runs.py's TWIN_NAMES"
    TWIN.parent.mkdir(parents=True, exist_ok=True)
    TWIN.write_text(text)
    return TWIN


def group(item) -> str | None:
    """The side run a lab test belongs to, if any."""
    stem = item.path.stem
    if stem in CLOCK_MODULES:
        return "clocks"
    if stem in SYSTEMD_LAB_MODULES:
        return "lab"
    if stem == "test_slurm":
        return "slurm-b" if item.get_closest_marker("second_slurm_lab") else "slurm"
    return None


def start(name: str, nodeids: list[str]) -> SideRun:
    """pytest of these tests in the background, with reports of its own (and the twin's file for `slurm-b`)."""
    folder = Path(tempfile.mkdtemp(prefix=f"clusterbook-side-{name}-"))
    env = {**os.environ, CHILD: "1", "INVOKE_CLUSTERBOOK_REPORTS": str(folder / "reports")}
    if name == "slurm-b":
        env[SLURM_LAB_FILE] = str(write_twin())
    with (folder / "pytest.log").open("w") as stream:
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
                f"--junitxml={folder / 'junit.xml'}", *nodeids]
        process = subprocess.Popen(ahead(argv) if name == "clocks" else argv, cwd=ROOT, env=env,
                                   stdout=stream, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return SideRun(name, process, folder)


def hand_over(items: list) -> tuple[list, list[SideRun]]:
    """If the session selects the waiter (and is no side run itself): every grouped test goes to its group's side run,
    started now. The tests handed over, and the side runs."""
    if os.environ.get(CHILD) or not any(item.path.stem == WAITER for item in items):
        return [], []
    groups: dict[str, list] = {}
    for item in items:
        if name := group(item):
            groups.setdefault(name, []).append(item)
    runs = [start(name, [item.nodeid for item in members]) for name, members in groups.items()]
    return [item for members in groups.values() for item in members], runs
