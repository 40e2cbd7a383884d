"""One home per node path (issue 34): layout.py names every generated file; runbooks upload by that name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure import layout
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.runbooks import available, step_sources

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ["cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"]
NODE_PATH = re.compile(r"(?<![\w}.])/(?:etc|usr|var|opt|run|srv|home|scratch|cluster)(?:/[\w.{}-]+)+")


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_rendered_file_has_an_id_and_lives_where_layout_says(name):
    c = load_cluster(ROOT / name)
    seen = set()
    for a in render_artifacts(c):
        assert a.id, f"{a.node}:{a.path} has no artifact id"
        assert (a.node, a.tier, a.id) not in seen, f"two files named {a.id} on {a.node}"
        seen.add((a.node, a.tier, a.id))
        assert a.path == layout.path(c, a.id, c.tier(a.tier) if a.tier else None)


def test_no_node_path_is_written_both_in_runbooks_and_in_python():
    """A node path has one home: Python (layout.py and the templates). A runbook names files by id or by
    `files.<id>`, so moving a file is one edit."""
    python = "\n".join(p.read_text() for p in (ROOT / "clusterbook").rglob("*") if p.suffix in (".py", ".j2"))
    literals = {m.split("{")[0] for rb in (ROOT / "runbooks").glob("*.yaml") for m in NODE_PATH.findall(rb.read_text())}
    assert sorted(m for m in literals if m in python) == []


def test_runbooks_upload_only_ids_that_layout_knows():
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    known = set(layout.cluster_paths(c)) | {k for t in c.tiers for k in layout.tier_paths(c, t)}
    uploads = {a.upload for book in available().values() for s in step_sources(book) for a in s.body.actions
               if hasattr(a, "upload")}
    assert uploads and uploads <= known, uploads - known


def test_the_path_literal_check_can_fail():
    assert NODE_PATH.findall("run: nft -f /etc/nftables.d/llama-rpc-{{ tier.name }}.nft")[0].split("{")[0] == (
        "/etc/nftables.d/llama-rpc-")  # as the test above compares it: in layout.py's f-string
    assert NODE_PATH.findall("{{ files.rpc_rules }} >/dev/null") == []


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_part_python_names_is_a_part_of_its_runbook(name):
    """Python finds steps by the parts the runbooks declare (deploy.build, deploy.<tier>-workers, the engine link,
    the job submit), never by step id: each part it names has steps."""
    from clusterbook.pure.operations import cluster_operations, tier_operations

    c = load_cluster(ROOT / name)
    books = available()
    named = {(op.runbook, op.part) for op in cluster_operations(c) + tier_operations(c) if op.part}
    named |= {("install", "engine-link"), ("deploy-slurm", "job-submit")}  # pure/phases.py
    for runbook, part in named:
        assert any(part in s.parts for s in books[runbook].runbook.steps), f"{runbook} has no steps of part {part}"
