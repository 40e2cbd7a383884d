"""What the site tells a client and the person on call (issue 67): the API page's table of what the gateway answers,
with the figures the gateway is configured with; a one-line check from a phone in every troubleshooting entry."""

import json


def test_the_api_page_tells_clients_each_answer_of_the_gateway_with_the_figures_it_uses():
    """Issue 67: an error table on the API page, the client's next step for each; its figures are the ones the
    gateway is configured with (the body limit, the cap, the number of failures)."""
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.pages.apipage import error_table
    from clusterbook.pure.render.node_config import wake_config

    from .test_path_roles import ROOT

    c = load_cluster(ROOT / "cluster.yaml")
    page, config = error_table(c), json.loads(wake_config(c))
    assert f"limit of {config['body_max'] >> 20} MiB" in page and f"holds {config['in_flight_max']} requests" in page
    assert f"failed {config['max_lost']} times while answering this request" in page
    for status in ("`400`", "`411`", "`413`", "`429`", "`500`", "`503`", "an `error` event"):
        assert status in page


def test_each_troubleshooting_entry_can_be_confirmed_fixed_from_a_phone():
    """Issue 67 row 3: "Verify it is fixed" needed the checkout and the keys; it now starts with a line any tailnet
    device runs: the tier's /health through the gateway (not for a tier on demand: it would wake it) and the
    published status feed."""
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.pages.operatepages import phone_check

    from .test_path_roles import ROOT

    c = load_cluster(ROOT / "cluster.yaml")
    assert "curl -sf -m 10 https://slurm-ctl.tailc46cd0.ts.net/health" in phone_check(c, "fast")
    assert "/reasoning/health" not in phone_check(c, "reasoning")  # on demand
    assert "https://slurm-ctl.tailc46cd0.ts.net/docs/status.json" in phone_check(c, "reasoning")


def test_a_decision_that_states_figures_says_they_are_of_its_date_and_where_todays_are():
    """Issue 67 row 5: decisions that are not superseded still stated figures that have moved (D18's largest
    context 35,584; the plan now offers more), with no note."""
    from pathlib import Path

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.pages.operatepages import decisions

    c = load_cluster(Path(__file__).resolve().parents[2] / "cluster.yaml")
    page = decisions(c)
    entries = {chunk.split(" ", 1)[0]: chunk for chunk in page.split("\n## ")[1:] + [page.split("\n## ")[0][3:]]}
    assert "Its figures are those of 2026-11-26" in entries["D18"] and "[Capacity](capacity.md)" in entries["D18"]
    assert "Its figures are those of" not in entries["D14"]  # superseded: it says so instead
    assert "Superseded by [D18]" in entries["D14"]


def test_the_rpc_note_names_the_firewall_the_workers_have():
    """Issue 67 row 5: the Tiers page said the workers' nftables rules guard the RPC port; beefcake2's Rocky
    workers get firewalld rich rules, the lab's Debian workers nftables."""
    from pathlib import Path

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.kinds import plan_tier
    from clusterbook.pure.pages.tierpages import tier_notes

    root = Path(__file__).resolve().parents[2]
    for file, words in (("cluster.yaml", "firewalld rich rules"), ("lab/cluster.yaml", "nftables rules")):
        c = load_cluster(root / file)
        tier = c.tier("reasoning")
        note = next(n for n in tier_notes(c, tier, plan_tier(c, tier)) if "RPC has no authentication" in n)
        assert f"each worker's {words} accept the port" in note, note


def test_an_operating_system_the_file_does_not_give_is_assumed_on_every_page_that_shows_it():
    """Issue 67 row 5: slurm-ctl's OS read "(assumed)" on the guide and not on the Hardware page."""
    from pathlib import Path

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.pages.bringuppages import prerequisites
    from clusterbook.pure.pages.tierpages import hardware

    c = load_cluster(Path(__file__).resolve().parents[2] / "cluster.yaml")
    for page in (hardware(c), prerequisites(c)):
        line = next(line for line in page.splitlines() if "slurm-ctl" in line and "debian 12" in line)
        assert "(assumed: the file does not say)" in line.replace("\\", ""), line  # markdown escapes the parens
