"""apply and rollback mark a tier behind the gateway as changing on the gateway node, and take the mark away after
the change, also when it fails; a phase that is no tier behind the gateway marks nothing."""

import pytest

from clusterbook.effects.change_hold import changing
from clusterbook.model.loader import load_cluster

from .fakehosts import FakeHosts, Rule
from .test_path_roles import ROOT


def test_the_mark_is_written_on_the_gateway_before_the_change_and_removed_after_it_fails():
    c = load_cluster(ROOT / "cluster.yaml")
    hosts = FakeHosts()
    with pytest.raises(RuntimeError), changing(c, "reasoning", hosts):
        assert [(h, cmd.split(" && ")[0]) for _, h, cmd in hosts.calls] == [
            ("slurm-ctl", "mkdir -p /run/clusterbook-hold")]
        assert hosts.calls[0][2].endswith("$(( $(date +%s) + 600 )) > /run/clusterbook-hold/reasoning.changing")
        raise RuntimeError("the deploy failed")
    assert hosts.calls[-1] == ("run", "slurm-ctl", "rm -f /run/clusterbook-hold/reasoning.changing")


def test_a_phase_that_is_no_tier_behind_the_gateway_marks_nothing():
    c = load_cluster(ROOT / "cluster.yaml")
    hosts = FakeHosts()
    for phase in ("engine", "gateway", None):
        with changing(c, phase, hosts):
            pass
    assert hosts.calls == []


def test_a_mark_that_cannot_be_written_does_not_stop_the_change(capsys):
    c = load_cluster(ROOT / "cluster.yaml")
    hosts = FakeHosts(rules={"slurm-ctl": [Rule("mkdir", 1, "", "read-only file system")]})
    with changing(c, "fast", hosts):
        done = True
    assert done and "will not hold fast's requests" in capsys.readouterr().out
