"""One phase's acceptance scenarios in a pytest of their own, read back from its JUnit file."""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from clusterbook.effects.console import console
from clusterbook.pure import packagedata
from clusterbook.pure.apply_history import ScenarioRun
from clusterbook.pure.phases import Phase


def run_scenarios(cluster_file: str, phase: Phase, when: str, out: Path, names: dict[str, str]) -> ScenarioRun:
    """The phase's scenarios (its tag; a tier's narrowed to that tier) against the file's cluster; `names` turns
    pytest's test names back into the scenarios' own."""

    junit = out / f"{phase.name}-{when.replace(' ', '-')}.junit.xml"
    argv = [sys.executable, "-m", "pytest", str(packagedata.ACCEPTANCE), "--live-cluster", cluster_file, "-p",
            "no:cacheprovider", "-m", phase.scenarios, f"--junitxml={junit}", "-q", "--tb=line", "-rN"]
    if phase.tier:
        argv += ["--tier", phase.tier]
    console.print(f"[bold]{phase.name}[/]: scenarios {when} …")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    run = ScenarioRun(when, seconds=time.monotonic() - started, report=str(junit))
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        run.failed.append(f"pytest exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}")
        return run
    for case in cases:
        name = names.get(case.get("name", ""), case.get("name", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            run.failed.append(name)
        elif case.find("skipped") is None:
            run.passed.append(name)
    colour = "green" if run.ok else "red"
    console.print(f"  [{colour}]{len(run.passed)} passed, {len(run.failed)} failed[/] ({run.seconds:.0f} s)"
                  + "".join(f"\n  [red]failed:[/] {n}" for n in run.failed))
    return run
