"""Host-free fixture tests of runbook expansion and the executor's decisions (pyinfra's style): for each case in
tests/fixtures/executor/, (cluster file, runbook, facts on the hosts) -> the outcome of every action, in order.
Set UPDATE_FIXTURES=1 to rewrite the expected lines after a deliberate change, then review the diff."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from clusterbook.effects.executor import Executor, Outcome, RunStarted, StepFinished, StepStarted
from clusterbook.model.loader import load_cluster
from clusterbook.pure import layout
from clusterbook.pure.render.artifacts import Artifact, render_artifacts
from clusterbook.pure.runbooks import Command, PutFile, available, expand

from .edits import edited_cluster
from .fakehosts import FakeHosts, Rule

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests/fixtures/executor").glob("*.yaml"))


def facts(expansion, case: dict) -> FakeHosts:
    """The hosts before the run. `state: fresh`: no files, every `unless` check fails; `converged`: every file
    as rendered, every check passes. Waits (`until`) see their text at once. The case's own facts come last."""
    hosts = FakeHosts(unreachable=set(case.get("unreachable", [])))
    converged = case.get("state") == "converged"
    for step in expansion.steps:
        for host, actions in step.hosts.items():
            rules = hosts.rules.setdefault(host, [])
            for a in actions:
                if isinstance(a, PutFile) and converged:
                    hosts.files.setdefault(host, {})[a.path] = a.content.encode()
                elif isinstance(a, Command):
                    if a.unless:
                        rules.append(Rule("^" + re.escape(a.unless) + "$", 0 if converged else 1))
                    if a.until:
                        rules.append(Rule("^" + re.escape(a.command) + "$", 0, a.until + "\n"))
    for host, changes in case.get("files", {}).items():  # files that differ from the render
        for path, content in changes.items():
            hosts.files.setdefault(host, {})[path] = content.encode()
    for host, rules in case.get("rules", {}).items():  # the case's rules win over the defaults
        hosts.rules[host] = [Rule(**r) for r in rules] + hosts.rules.get(host, [])
    return hosts


def case_cluster(case: dict, folder: Path):
    """The case's cluster file, with its `cluster_edits` made first (edits.py): e.g. the beefcake2 file with
    slurm-ctl declared Rocky, one field changed rather than a second copy of the file."""
    if not case.get("cluster_edits"):
        return load_cluster(ROOT / case["cluster"])
    return edited_cluster(case["cluster"], case["cluster_edits"], folder)


def run_case(path: Path, state_dir: Path) -> tuple[dict, list[str], str | None, list]:
    case = yaml.safe_load(path.read_text())
    cluster = case_cluster(case, state_dir)
    extra = [Artifact(node, layout.path(cluster, ids), content, "archive", id=ids)
             for node, files in case.get("extra_artifacts", {}).items()
             for ids, content in files.items()]  # what a command adds to the rendered files (docs.publish)
    expansion = expand(available()[case["runbook"]], cluster, case.get("tier"), variables=case.get("variables"),
                       artifacts=render_artifacts(cluster) + extra)
    hosts = facts(expansion, case)
    events: list = []
    report = Executor(hosts, state_dir, [events.append], sleep=lambda s: None).run(expansion)
    lines = [f"{o.step} {o.host} {o.status}: {o.action.splitlines()[0][:110]}" for o in report.outcomes]
    return case, lines, report.failure, events


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_fixture(path, tmp_path):
    case, lines, failure, events = run_case(path, tmp_path)
    if os.environ.get("UPDATE_FIXTURES"):
        case["expect"] = {"outcomes": lines, "failure": failure}
        path.write_text(path.read_text().split("\nexpect:")[0].rstrip() + "\n"
                        + yaml.safe_dump({"expect": case["expect"]}, sort_keys=False, width=200))
        return
    assert lines == case["expect"]["outcomes"]
    assert failure == case["expect"]["failure"]
    # the events tell the same story, in order: one run, each step started then finished, outcomes between
    assert isinstance(events[0], RunStarted)
    assert [type(e) for e in events if not isinstance(e, Outcome)][1:] == \
        [StepStarted, StepFinished] * (len([e for e in events if isinstance(e, StepStarted)]))
    assert len([e for e in events if isinstance(e, Outcome)]) == len(lines)


def test_every_runbook_has_a_fixture():
    covered = {yaml.safe_load(path.read_text())["runbook"] for path in CASES}
    assert set(available()) <= covered, f"runbooks without a host-free fixture: {sorted(set(available()) - covered)}"


def test_a_command_reads_its_runbook_alone_and_finds_the_same_one(tmp_path):
    from clusterbook.pure.runbooks import runbook_named

    books = available()
    for name, book in books.items():  # a runbook's id is its file's name, so one file is enough to read
        assert runbook_named(name).runbook == book.runbook
    with pytest.raises(KeyError):
        runbook_named("no-such-runbook")
    (tmp_path / "deploy.yaml").write_text((ROOT / "runbooks/stop.yaml").read_text())  # id: stop, in deploy.yaml
    with pytest.raises(ValueError, match="differs from the file's name"):
        available(tmp_path)
