"""Troubleshooting commands as an operator pastes them at 3 a.m.: a diagnosis only reads (readonly.py), returns on
its own and has nothing left to fill in; and the success criteria name scenarios that exist."""

from __future__ import annotations

import re

from clusterbook.model.problems import Path
from clusterbook.model.readonly import not_read_only
from clusterbook.model.schema import Cluster

Finding = tuple[Path, str]

# how a command never returns, and a placeholder the operator would have to fill in at 3 a.m. (issue 32); what a
# diagnosis may run is readonly.py's list
UNBOUNDED = re.compile(r"\bwatch\s|\btail\s+(-\S*\s+)*-[a-zA-Z]*[fF]\b|\bjournalctl\b[^|;&]*\s-f\b|"
                       r"\bnvidia-smi\b[^|;&]*\s-l(ms)?\b|\btop\b(?![^|;&]*\s-b)|\bping\s(?![^|;&]*\s-c)")
PLACEHOLDER = re.compile(r"(?<![\w$.{-])(JOBID|JOB_ID|PID|NODE|HOSTNAME|TOKEN)(?![\w=])|=\.\.\.|<[a-z]+[ _-][a-z _-]*>")


def criteria_findings(c: Cluster, scenario_names: set[str]) -> list[Finding]:
    """A criterion names acceptance scenarios that exist (by name, in any case): a misspelt one checks nothing."""
    known = {n.casefold() for n in scenario_names}
    return [(("criteria", i, "scenarios", j), f"no acceptance scenario is named '{name}' (the {len(known)} "
                                              "Scenario lines of clusterbook/acceptance/features/*.feature name them)")
            for i, criterion in enumerate(c.criteria) for j, name in enumerate(criterion.scenarios)
            if name.casefold() not in known]


def fix_lint(run: str, act: bool) -> list[str]:
    """What is wrong with a troubleshooting command as an operator would paste it: a diagnosis that acts, a command
    that never returns (unless under `timeout`), a placeholder left to fill in."""
    out = []
    if not act and (part := not_read_only(run)):
        out.append(f"'{part[:80]}' is not known to only read: mark the step act: true and say what it disturbs "
                   "(disturbs: …), so the page shows it apart from the read-only diagnosis")
    if (m := UNBOUNDED.search(run)) and not re.search(r"\btimeout\s+\d", run):
        out.append(f"'{m.group(0).strip()}' never returns on its own: bound it (timeout 10 …, -n, a count) so the "
                   "commands after it run")
    if m := PLACEHOLDER.search(run):
        out.append(f"'{m.group(0)}' is a placeholder the operator must fill in: compute it in the command "
                   "(e.g. $(squeue -h -n JOB -o %i)) or take it from the cluster file")
    return out
