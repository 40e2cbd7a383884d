"""verify's RPC firewall scenario asks the firewall each worker has (issue 66): firewalld's rich rules on EL (the
rendered script's --check), the nftables table on Debian; before, it asked nft on beefcake2's Rocky workers, which have
no such table, so verify could never pass there. Run against fake hosts: nothing here connects anywhere."""

import pytest

from clusterbook.acceptance.steps import rpc_workers
from clusterbook.model.loader import load_cluster

from .fakehosts import FakeHosts, Rule
from .test_path_roles import ROOT


@pytest.fixture(autouse=True)
def nothing_connects(monkeypatch):
    def refused(*args, **kwargs):
        raise OSError("refused: a test connects nowhere")
    monkeypatch.setattr(rpc_workers.socket, "create_connection", refused)


def test_el_workers_are_asked_for_their_firewalld_rules_not_an_nft_table():
    c = load_cluster(ROOT / "cluster.yaml")  # beefcake2: Rocky 8.10 workers
    hosts = FakeHosts(rules={w: [Rule("nft list", 1, "", "Error: No such file or directory")]
                             for w in ("vasp-01", "vasp-02", "vasp-03")})
    rpc_workers._rpc_firewall(c, hosts)
    asked = [cmd for _, _, cmd in hosts.calls]
    assert asked and all(cmd.endswith("--check") and "clusterbook-rpc-firewalld-reasoning" in cmd for cmd in asked)


def test_a_missing_rich_rule_fails_the_scenario_naming_the_worker():
    c = load_cluster(ROOT / "cluster.yaml")
    hosts = FakeHosts(rules={"vasp-03": [Rule("--check", 1, "", "")]})
    with pytest.raises(AssertionError, match="vasp-03: expected firewalld rich rules"):
        rpc_workers._rpc_firewall(c, hosts)


def test_debian_workers_are_asked_for_the_nft_table():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    hosts = FakeHosts()
    rpc_workers._rpc_firewall(c, hosts)
    assert [cmd for _, _, cmd in hosts.calls] and all(cmd.startswith("nft list table inet clusterbook_")
                                                      for _, _, cmd in hosts.calls)
