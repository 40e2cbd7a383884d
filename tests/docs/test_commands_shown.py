"""Every `invoke …` command the site shows exists for that cluster, and every runbook task among them passes
its --dry run (which contacts nothing)."""

import html
import re

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.operations import operations
from tests.inprocess import run_invoke

from .test_site import ROOT, build, needs_mermaid

INVOKE = re.compile(r"invoke ([a-z][a-z0-9_.-]*[a-z0-9])(?![<\w.])(?: --tier ([A-Za-z0-9_.-]+))?")


def plain_tasks() -> set[str]:
    """The tasks that are not a runbook operation of the configured file: they exist for every cluster (tasks.py's
    own list, with the per-tier tasks it added for cluster.yaml taken out)."""
    import tasks
    names = set(tasks.ns.task_names) | {alias for aliases in tasks.ns.task_names.values() for alias in aliases}
    return names - {op.task for op in tasks._operations}


PLAIN = plain_tasks()
DRY_TOO = {"apply"}  # not runbooks, but their --dry contacts nothing either: run it


def commands_on(site) -> set[tuple[str, str | None]]:
    found = set()
    for page in site.rglob("*.html"):
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(errors="replace")))
        found |= {(m.group(1).rstrip("."), m.group(2)) for m in INVOKE.finditer(text)}
    return found


@needs_mermaid
@pytest.mark.parametrize("cluster", ["cluster.yaml", "tests/clusters/ridge.yaml", "lab/cluster-slurm.yaml"])
def test_every_command_on_the_site_exists_and_its_dry_run_passes(cluster, tmp_path):
    build(cluster, tmp_path)
    ops = {op.task: op for op in operations(load_cluster(ROOT / cluster))}
    shown = commands_on(tmp_path)
    assert shown, "no invoke command found on the site"
    unknown = sorted(task for task, _ in shown if task not in PLAIN and task not in ops
                     and not task.endswith(".tier"))
    assert not unknown, f"the site shows tasks that do not exist for {cluster}: {unknown}"
    for task, tier in sorted(shown, key=lambda shown_task: (shown_task[0], shown_task[1] or "")):
        if task in ops or task.endswith(".tier") or task in DRY_TOO:
            argv = [task, "--dry", "--cluster", cluster] + (["--tier", tier] if tier else [])
            run = run_invoke(*argv, env={"INVOKE_CLUSTERBOOK_CLUSTER": cluster},
                             timeout=120)  # as its operators run them: with their file configured
            assert run.returncode == 0, f"invoke {' '.join(argv)}:\n{run.stdout[-1500:]}{run.stderr[-1500:]}"
