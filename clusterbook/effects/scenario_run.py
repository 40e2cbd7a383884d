"""One phase's acceptance scenarios in a pytest of their own, read back from its JUnit file."""

from __future__ import annotations

import json
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
    summary = junit.with_suffix("").with_suffix(".summary.md")  # its JSON beside it says which scenarios wait
    argv = [sys.executable, "-m", "pytest", str(packagedata.ACCEPTANCE), "--live-cluster", cluster_file, "-p",
            "no:cacheprovider", "-m", phase.scenarios, f"--junitxml={junit}", "--verify-summary", str(summary),
            "-q", "--tb=line", "-rN"]
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
    waits = waiting_scenarios(summary.with_suffix(".json"))
    for case in cases:
        name = names.get(case.get("name", ""), case.get("name", ""))
        if (case.find("failure") is not None or case.find("error") is not None) and name in waits:
            run.waiting.append(name)
        elif case.find("failure") is not None or case.find("error") is not None:
            run.failed.append(name)
        elif case.find("skipped") is None:
            run.passed.append(name)
    colour = "green" if run.ok else "red"
    console.print(f"  [{colour}]{len(run.passed)} passed, {len(run.failed)} failed[/]"
                  + (f", [cyan]{len(run.waiting)} waiting for their nodes[/]" if run.waiting else "")
                  + f" ({run.seconds:.0f} s)" + "".join(f"\n  [red]failed:[/] {n}" for n in run.failed))
    return run


def waiting_scenarios(path: Path) -> set[str]:
    """The scenarios the run's summary marks waiting (their tier's job waits for nodes other jobs hold)."""
    try:
        return {e["scenario"] for e in json.loads(path.read_text()) if e.get("outcome") == "waiting"}
    except (OSError, ValueError, KeyError, TypeError):
        return set()
