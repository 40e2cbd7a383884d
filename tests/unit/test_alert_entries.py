"""Every alert points to a troubleshooting entry the cluster file has (issue 32): a file with entries but not the
one an alert needs is refused with its line; a file with no troubleshooting at all gets alerts without links."""

import re
import shutil
from pathlib import Path

import pytest

from clusterbook.commands.cluster import checked_cluster
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.render.monitoring import alert_findings, alerts
from tests.conftest import copy_with_parts

from .edits import edited_cluster

ROOT = Path(__file__).resolve().parents[2]


def test_an_alert_whose_entry_is_missing_is_named_with_its_line(tmp_path):
    path = copy_with_parts(tmp_path)
    part = tmp_path / "cluster.d/troubleshooting.yaml"  # the file's entries are in this part of it
    text = part.read_text()
    start, end = text.index("  - id: rpc-on-ethernet"), text.index("  - id: rpc-port-blocked")
    part.write_text(text[:start] + text[end:])
    with pytest.raises(InputError) as raised:
        checked_cluster(str(path))
    [problem] = [str(p) for p in raised.value.problems]
    section = text[:text.index("\ntroubleshooting:")].count("\n") + 2  # the line of `troubleshooting:`
    assert f"cluster.d/troubleshooting.yaml:{section}: troubleshooting:" in problem, problem
    # only the RPC tier's slow decode has the RPC network as its first cause (issue 47: the single-node fast tier's
    # pointed there too)
    assert "alerts DecodeSlow (reasoning) point to" in problem and "'rpc-on-ethernet'" in problem, problem


def test_every_alert_of_beefcake2_and_the_lab_lands():
    for name in ("cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"):
        assert alert_findings(load_cluster(ROOT / name)) == [], name
    lab = load_cluster(ROOT / "lab/cluster.yaml")  # no troubleshooting section: no links to nowhere
    assert all("troubleshooting" not in rule["annotations"] for rule in alerts(lab))


@pytest.mark.tools
@pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool (./setup installs it)")
def test_a_tier_the_plan_says_waits_does_not_alert_while_the_other_serves(tmp_path):
    """beefcake2 as the seeds had it: fast on a node of the reasoning tier, both SLURM jobs asking for its only GPU,
    so one waits in the queue by design. The waiting tier's down, unregistered and pending alerts are quiet while
    the other tier answers, and fire when neither does: promtool runs the generated tests of both cases."""
    from clusterbook.effects.validators import validate
    from clusterbook.pure.render.artifacts import render_artifacts
    from clusterbook.pure.render.monitoring import waits_beside

    c = edited_cluster("cluster.yaml", {"tiers.0.node": "vasp-01", "planner.co_reside": []}, tmp_path)
    assert waits_beside(c) == {"fast": ["reasoning"], "reasoning": ["fast"]}
    rules = {(r["alert"], r["labels"].get("tier")): r["expr"] for r in alerts(c)}
    for alert in ("TierDown", "EndpointMissing", "TierPending"):
        assert 'unless on() (clusterbook_tier_healthy{tier="reasoning"} == 1 and time() - ' in rules[(alert, "fast")]
        assert 'unless on() (clusterbook_tier_healthy{tier="fast"} == 1 and time() - ' in rules[(alert, "reasoning")]
    files = [a for a in render_artifacts(c) if a.kind in ("rules", "rule-tests")]
    verdicts = validate(files)
    assert all(v.ok for v in verdicts), [v.output for v in verdicts if not v.ok]
    tests = next(a.text for a in files if a.kind == "rule-tests")
    assert tests.count('clusterbook_tier_healthy{tier="reasoning"}') >= 3  # the quiet cases are tested
    # as beefcake2 is declared (both serve at once), nothing is quieted so
    declared = alerts(load_cluster(ROOT / "cluster.yaml"))
    assert not any("unless on() (clusterbook_tier_healthy" in r["expr"] for r in declared)


def test_each_alert_names_every_cause_the_file_has_an_entry_for(beefcake2):
    """Issue 47 item 5: a tier that is down may be crashed, pending or gone with its GPU; a slow single-node tier is
    no RPC network's fault. The first cause is the runbook_url; the site and the when-index list them all."""
    from clusterbook.pure.render.monitoring import alerts, entries_of
    rules = {(r["alert"], r["labels"].get("tier")): entries_of(r) for r in alerts(beefcake2)}
    assert rules[("TierDown", "reasoning")] == ["rpc-worker-down", "job-not-starting-reasoning",
                                                "on-demand-not-serving", "worker-oom-killed",
                                                "gpu-memory-or-xid-reasoning"]  # reasoning is on demand
    assert rules[("TierDown", "fast")] == ["gateway-connection-refused-fast", "job-not-starting-fast",
                                           "gpu-memory-or-xid-fast"]  # each tier's own (issue 67)
    assert rules[("DecodeSlow", "fast")][0] == "gpu-memory-or-xid-fast"
    assert rules[("DecodeSlow", "reasoning")][0] == "rpc-on-ethernet"
    assert rules[("NodeExporterDown", None)] == ["node-down"]  # it linked nowhere
    url = next(r for r in alerts(beefcake2) if r["alert"] == "TierDown")["annotations"].get("runbook_url", "")
    assert url.endswith("/troubleshooting/#gateway-connection-refused-fast") or not url


def test_every_entry_says_its_impact_how_to_tell_it_is_fixed_and_whom_to_call(tmp_path):
    """Issue 47 item 5: each entry has impact (whom it hurts, the alerts that lead there with their severity, the
    most severe first), Diagnose/Act, how to tell it is fixed, and whom to call next: the owner's escalation in
    order, or where the file accepts none yet."""
    from clusterbook.pure.pages.operatepages import troubleshooting

    page = troubleshooting(load_cluster(ROOT / "cluster.yaml"))
    entries = page.split("\n## ")
    c = load_cluster(ROOT / "cluster.yaml")  # an entry for every tier: once per tier
    assert len(entries) == sum(len(c.tiers) if t.each_tier else 1 for t in c.troubleshooting)
    for entry in entries:
        assert "**Impact.**" in entry and "**Verify it is fixed.**" in entry and "**Not fixed?**" in entry, entry
    down = next(e for e in entries if "{ #rpc-worker-down }" in e)
    assert "the users of tier reasoning (the gateway's `/reasoning/`)" in down and "`TierDown` (critical)" in down
    assert "No owner is recorded yet ([D28](decisions.md#d28))" in down
    owned = edited_cluster("cluster.yaml", {"owner_unrecorded": None, "owner": {
        "name": "Ana", "contact": "ana@lab.example", "escalation": [
            {"name": "HPC team", "contact": "#hpc", "when": "after 30 min"}]}}, tmp_path)
    assert "Escalate in this order: Ana (ana@lab\\.example) → HPC team (\\#hpc)." in troubleshooting(owned)  # as text


def test_each_alert_of_a_tier_leads_only_to_that_tiers_commands_and_nodes():
    """Issue 67 row 1: five of the fast tier's eight alert links led to entries whose commands checked
    llama-reasoning, vasp-01 and vasp-03. An entry written for every tier (each_tier) is shown once per tier, its
    commands filled with that tier's; an alert of a tier links only entries of that tier or of none."""
    from clusterbook.pure import topology as topo
    from clusterbook.pure import troubles
    from clusterbook.pure.fixsteps import fix_step_commands

    c = load_cluster(ROOT / "cluster.yaml")
    shown = {t.id: t for t in troubles.entries(c)}
    checked = 0
    for rule in alerts(c):
        tier = rule["labels"].get("tier")
        if not tier:
            continue
        others = [t for t in c.tiers if t.name != tier]
        foreign = {topo.units(t).job for t in others} | {n for t in others for n in t.nodes} - set(c.tier(tier).nodes)
        for entry in rule["annotations"]["troubleshooting"].split(", "):
            trouble = shown[entry]
            assert trouble.tier in (None, tier), (rule["alert"], tier, entry)
            lines = [line for step in trouble.fix for line in fix_step_commands(c, trouble, step)]
            said = [f for f in foreign for line in lines if re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", line)]
            assert not said, (rule["alert"], tier, entry, said)
            checked += 1
    assert checked >= 15
    assert rule["annotations"].get("runbook_url", "").endswith(rule["annotations"]["troubleshooting"].split(", ")[0])
