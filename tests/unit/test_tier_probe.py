"""The tier probe (clusterbook/node/tier_probe.py) for a SLURM tier, against a fake SLURM queue: its job pending,
waiting for nodes another user's jobs hold (named in the series' labels, escaped as the textfile format reads them),
and another user's job of its name never counted as its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import clusterbook.node

from .fakeslurm import Slurm

NODE = Path(clusterbook.node.__file__).parent
sys.path.insert(0, str(NODE))
import slurm_jobs  # noqa: E402


@pytest.fixture
def probe(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("clusterbook_tier_probe", NODE / "tier_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    slurm = Slurm()
    monkeypatch.setattr(slurm_jobs, "command", slurm.command)
    job = {"job": "llama-fast", "user": "root", "nodes": ["vasp-02"], "marks": {"ids": str(tmp_path / "ids")}}
    tier = {"name": "fast", "job": job, "record": str(tmp_path / "fast.json"), "url": None}
    return module, slurm, tier


def test_a_tier_waiting_for_vasps_nodes_says_so_and_who_holds_them(probe):
    module, slurm, tier = probe
    slurm.add("llama-fast", "mallory", "PENDING", "JobHeldUser")  # another's job of its name: not its own
    assert module.probe(tier)[:3] == ['clusterbook_tier_registered{tier="fast"} 0',
                                     'clusterbook_tier_pending{tier="fast"} 0',
                                     'clusterbook_tier_waiting_for_nodes{tier="fast"} 0']
    mine = slurm.add("llama-fast", "root", "PENDING", "Resources")
    slurm_jobs.record(tier["job"], mine)
    vasp = slurm.add("vasp-relax", 'al"ice', "RUNNING")
    holder = next(j for j in slurm.jobs if j.id == vasp)
    holder.nodes, holder.partition = "vasp-02", "vasp"
    next(j for j in slurm.jobs if j.id == mine).start = "2026-12-05T18:00:05"
    assert module.probe(tier)[1:4] == ['clusterbook_tier_pending{tier="fast"} 1',
                                      'clusterbook_tier_waiting_for_nodes{tier="fast"} 1',
                                      'clusterbook_tier_waiting_info{tier="fast", held_by="al\\"ice (vasp)", '
                                      'start="2026-12-05T18:00:05"} 1']
    slurm.fails = {"squeue"}  # slurmctld does not answer: no figure rather than a wrong one
    assert not any("pending" in line or "waiting" in line for line in module.probe(tier))


def test_label_values_are_escaped_and_bounded(probe):
    module, _, _ = probe
    assert module.escaped('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert len(module.escaped("x" * 500)) == 200
