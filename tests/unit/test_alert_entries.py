"""Every alert points to a troubleshooting entry the cluster file has (issue 32): a file with entries but not the
one an alert needs is refused with its line; a file with no troubleshooting at all gets alerts without links."""

from pathlib import Path

import pytest

from clusterbook.commands.cluster import checked_cluster
from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError
from clusterbook.pure.render.monitoring import alert_findings, alerts

ROOT = Path(__file__).resolve().parents[2]


def test_an_alert_whose_entry_is_missing_is_named_with_its_line(tmp_path):
    text = (ROOT / "cluster.yaml").read_text()
    start, end = text.index("  - id: rpc-on-ethernet"), text.index("  - id: rpc-port-blocked")
    path = tmp_path / "cluster.yaml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(InputError) as raised:
        checked_cluster(str(path))
    [problem] = [str(p) for p in raised.value.problems]
    section = text[:text.index("\ntroubleshooting:")].count("\n") + 2  # the line of `troubleshooting:`
    assert f"cluster.yaml:{section}: troubleshooting:" in problem, problem
    assert "DecodeSlow (fast), DecodeSlow (reasoning)" in problem and "'rpc-on-ethernet'" in problem


def test_every_alert_of_beefcake2_and_the_lab_lands():
    for name in ("cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"):
        assert alert_findings(load_cluster(ROOT / name)) == [], name
    lab = load_cluster(ROOT / "lab/cluster.yaml")  # no troubleshooting section: no links to nowhere
    assert all("troubleshooting" not in rule["annotations"] for rule in alerts(lab))
