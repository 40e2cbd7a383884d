"""Runbook fragments and typed actions: a step is written once (runbooks/fragments/), systemctl and the keeper's marks
are written in Python, and a test fails when two places run the same commands."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure import services
from clusterbook.pure.runbooks import FRAGMENTS, RUNBOOK_DIR, Command, available, expand, load_runbook

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"timeout", "retries", "delay", "notify", "name", "when"}  # how an action runs, not what it runs


def _sources() -> list[tuple[str, dict]]:
    """(owner, raw document) of every runbook and fragment, as written."""
    out = [(f"runbook {p.stem}", yaml.safe_load(p.read_text())) for p in sorted(RUNBOOK_DIR.glob("*.yaml"))]
    return out + [(f"fragment {p.stem}", yaml.safe_load(p.read_text()))
                  for p in sorted((RUNBOOK_DIR / FRAGMENTS).glob("*.yaml"))]


def written_twice(sources: list[tuple[str, dict]]) -> list[str]:
    """Commands written in two places, and steps whose actions are another's: a shell command (`run:`) belongs to
    one step, one fragment or one runbook's handlers; a step repeated is a fragment to use."""
    runs, bodies = defaultdict(set), defaultdict(set)
    for owner, doc in sources:
        steps = doc.get("steps", [doc] if "actions" in doc else [])
        for step in steps:
            where = owner if owner.startswith("fragment") else f"{owner} step {step.get('id')}"
            actions = step.get("actions", [])
            for action in actions:
                if "run" in action:
                    runs[" ".join(action["run"].split())].add(where)
            if actions:  # the same actions on the same hosts
                key = json.dumps([step.get("hosts")] + [{k: v for k, v in a.items() if k not in SETTINGS}
                                                         for a in actions], sort_keys=True)
                bodies[key].add(where)
        for handler in (doc.get("handlers") or {}).values():
            if "run" in handler:
                where = owner if owner.startswith("fragment") else f"{owner} handlers"
                runs[" ".join(handler["run"].split())].add(where)
    twice = [f"`{cmd[:60]}` in {', '.join(sorted(w))}" for cmd, w in runs.items() if len(w) > 1]
    return twice + [f"the same actions in {', '.join(sorted(w))}" for w in bodies.values() if len(w) > 1]


def test_no_step_or_command_is_written_twice():
    assert written_twice(_sources()) == []


def test_the_written_twice_check_can_fail():
    copy = {"id": "x", "steps": [{"id": "a", "actions": [{"run": "systemctl  restart x"}]},
                                 {"id": "b", "actions": [{"upload": "env"}, {"service": "x", "timeout": 5}]},
                                 {"id": "c", "actions": [{"upload": "env"}, {"service": "x"}]}]}
    other = {"id": "y", "steps": [{"id": "a", "actions": [{"run": "systemctl restart x"}, {"upload": "env"}]}],
             "handlers": {"h": {"run": "nft -f f"}}}
    frag = {"id": "f", "actions": [{"run": "nft -f f"}], "handlers": {"again": {"run": "nft -f f"}}}
    found = written_twice([("runbook x", copy), ("runbook y", other), ("fragment f", frag)])
    assert found == ["`systemctl restart x` in runbook x step a, runbook y step a",
                     "`nft -f f` in fragment f, runbook y handlers",
                     "the same actions in runbook x step b, runbook x step c"]


def test_every_fragment_is_used_and_named_after_its_file():
    used = {s.use for book in available().values() for s in book.runbook.steps if s.use}
    files = {p.stem for p in (RUNBOOK_DIR / FRAGMENTS).glob("*.yaml")}
    assert used == files


def test_a_used_fragment_expands_like_a_step_with_its_arguments():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    steps = {s.id: s for s in expand(available()["restart"], c, "reasoning").steps}
    head = steps["head"]
    assert head.title == "Restart llama-reasoning, then wait until http://10.213.0.11:8081/health answers 200"
    commands = [a.command for a in head.hosts["lab1"]]
    assert "systemctl restart llama-reasoning" in commands and len(commands) == 3  # reload check, restart, wait
    deploy = {s.id: s for s in expand(available()["deploy-rpc"], c, "reasoning").steps}
    assert [a.command for a in deploy["health"].hosts["lab1"]] == commands[2:]  # the same wait, no restart
    assert deploy["health"].title.startswith("Wait until")


@pytest.mark.parametrize("step, message", [
    ({"id": "s", "use": "no-such"}, "no fragment 'no-such' (there are: api-key,"),
    ({"id": "s", "use": "head-answers", "with": {"restrat": True}}, "takes restart: unknown restrat"),
    ({"id": "s", "use": "head-answers", "title": "mine"}, "takes its title from the fragment"),
    ({"id": "s", "title": "t", "hosts": "all"}, "a step without `use:` needs actions"),
    ({"id": "s", "title": "t", "hosts": "all", "actions": [{"run": "true", "upload": "env"}]},
     "an action has exactly one of: upload, run,"),
    ({"id": "s", "title": "t", "hosts": "all", "actions": [{"service": "a;b"}]}, "not a unit name: 'a;b'"),
])
def test_a_bad_step_names_its_file_line_and_field(tmp_path, step, message):
    shutil.copytree(RUNBOOK_DIR / FRAGMENTS, tmp_path / FRAGMENTS)
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"id": "x", "title": "x", "steps": [step]}, sort_keys=False))
    with pytest.raises(InputError) as err:
        expand(load_runbook(path), load_cluster(ROOT / "lab/cluster.yaml"))
    assert message in str(err.value) and f"{path}:" in str(err.value)


def test_a_template_error_in_a_fragment_names_the_fragments_line(tmp_path):
    shutil.copytree(RUNBOOK_DIR / FRAGMENTS, tmp_path / FRAGMENTS)
    (tmp_path / FRAGMENTS / "numactl.yaml").write_text("id: numactl\ntitle: t\nhosts: all\nactions:\n"
                                                       "  - run: echo {{ no_such.x }}\n")
    (tmp_path / "x.yaml").write_text("id: x\ntitle: x\nsteps:\n  - {id: s, use: numactl}\n")
    with pytest.raises(InputError) as err:
        expand(load_runbook(tmp_path / "x.yaml"), load_cluster(ROOT / "lab/cluster.yaml"))
    assert f"{tmp_path / FRAGMENTS / 'numactl.yaml'}:5: actions[0].run: template error" in str(err.value)


RELOAD = ("systemctl daemon-reload", "! systemctl show -p NeedDaemonReload --value u | grep -qx yes")


@pytest.mark.parametrize("units, state, enabled, expected", [
    (["u"], "started", True, [RELOAD, ("systemctl enable --now u",
                                       "systemctl is-enabled --quiet u && systemctl is-active --quiet u")]),
    (["u"], "started", None, [RELOAD, ("systemctl start u", "systemctl is-active --quiet u")]),
    (["a", "b"], "stopped", False, [("systemctl disable --now a b",
                                     "! systemctl is-active --quiet a && ! systemctl is-active --quiet b && "
                                     "! systemctl is-enabled --quiet a 2>/dev/null && "
                                     "! systemctl is-enabled --quiet b 2>/dev/null")]),
    (["u"], "try-restarted", None, [RELOAD, ("! systemctl cat u >/dev/null 2>&1 || systemctl try-restart u", None)]),
])
def test_a_service_state_is_reached_by_these_commands(units, state, enabled, expected):
    got = [(m.command, m.unless) for m in services.service_commands(units, state, enabled)]
    assert got == expected


@pytest.mark.parametrize("units, state, reload, check, expected", [
    (["nginx"], "reloaded", False, "nginx -t -q", "! systemctl is-active --quiet nginx || { nginx -t -q && systemctl "
                                                  "reload nginx; }"),
    (["t.timer"], "restarted", True, None, "systemctl daemon-reload && systemctl restart t.timer"),
    ([], "restarted", True, None, "systemctl daemon-reload"),
    (["a", "b"], "try-restarted", True, None, "systemctl daemon-reload && { { ! systemctl cat a >/dev/null 2>&1 || "
                                              "systemctl try-restart a; } && { ! systemctl cat b >/dev/null 2>&1 || "
                                              "systemctl try-restart b; }; }"),
])
def test_a_handler_restarts_or_reloads_with_one_command(units, state, reload, check, expected):
    assert services.handler_command(units, state, reload, check) == expected


def test_the_keepers_marks_are_named_in_one_place():
    """The runbooks mark a SLURM tier through keeper_mark; no runbook spells a marker file."""
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    for text in (p.read_text() for p in RUNBOOK_DIR.rglob("*.yaml")):
        assert ".wanted" not in text and ".released" not in text and "keeper_dir" not in text
    deploy = {s.id: s for s in expand(available()["deploy-slurm"], c, "reasoning").steps}
    mark = next(a for a in deploy["keeper"].hosts["slab1"] if isinstance(a, Command) and "touch" in a.command)
    assert mark.command.endswith("touch /var/lib/clusterbook/demand/llama-reasoning.wanted")
