"""One phase's acceptance scenarios in a pytest session of this process, read back from its JUnit file."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from clusterbook.effects.console import console
from clusterbook.effects.in_process import run_pytest
from clusterbook.pure import packagedata
from clusterbook.pure.apply_history import ScenarioRun
from clusterbook.pure.phases import Phase

SCENARIOS_DEADLINE_S = 1800  # a phase's scenarios still running after this hang: they are stopped and count as failed


def run_scenarios(cluster_file: str, phase: Phase, when: str, out: Path, names: dict[str, str]) -> ScenarioRun:
    """The phase's scenarios (its tag; a tier's narrowed to that tier) against the file's cluster; `names` turns
    pytest's test names back into the scenarios' own. A session that hangs is interrupted at its deadline, and a
    session that ends without its JUnit file (a crash of the run's plugins) fails the run: either way apply then
    rolls the phase back."""

    junit = out / f"{phase.name}-{when.replace(' ', '-')}.junit.xml"
    summary = junit.with_suffix("").with_suffix(".summary.md")  # its JSON beside it says which scenarios wait
    argv = [str(packagedata.ACCEPTANCE), "--live-cluster", cluster_file, "-p", "no:cacheprovider",
            "-m", phase.scenarios, f"--junitxml={junit}", "--verify-summary", str(summary), "-q", "--tb=line", "-rN"]
    if phase.tier:
        argv += ["--tier", phase.tier]
    console.print(f"[bold]{phase.name}[/]: scenarios {when} …")
    started = time.monotonic()
    session = run_pytest(argv, quiet=True, timeout=SCENARIOS_DEADLINE_S)
    run = ScenarioRun(when, seconds=time.monotonic() - started, report=str(junit))
    if session.timed_out:
        run.failed.append(f"the scenarios ran past {SCENARIOS_DEADLINE_S} s and were stopped: "
                          f"{session.output.strip()[-300:]}")
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        run.failed.append(f"pytest exited {session.status}: {session.output.strip()[-300:]}")
        return run
    waits = waiting_scenarios(summary.with_suffix(".json"))
    for case in (c for c in cases if c.get("name")):  # a session stopped at its deadline leaves one unnamed
        name = names.get(case.get("name"), case.get("name"))
        failed = next((e for e in (case.find("failure"), case.find("error")) if e is not None), None)
        if failed is not None and name in waits:
            run.waiting.append(name)
        elif failed is not None:
            why = " ".join((failed.get("message") or "").split())[:240]  # what failed: on call needs more than a name
            run.failed.append(f"{name}: {why}" if why else name)
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
