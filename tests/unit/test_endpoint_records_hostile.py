"""The endpoint records' two shell readers as rendered for the SLURM lab, run by bash with real jq (and fakes of
nginx and systemctl) on temporary folders: the gateway's upstream updater and Prometheus' target writer. A record is
anyone's who can write the shared folder, so each follows it only to a node of the tier and a port of digits: nothing
of a record's text reaches nginx's configuration, and Prometheus scrapes no other address."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.render.artifacts import render_artifacts

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = [
    {"host": "10.214.0.11;\n}\nserver { listen 80; root /; }\nupstream x {\n server 10.214.0.11", "port": 8181},
    {"host": "10.214.0.11 10.214.0.12", "port": 8181},  # two of the tier's addresses: one word is asked for
    {"host": "evil.example", "port": 8181},  # not a node of the tier
    {"host": "*", "port": 8181},
    {"host": "10.214.0.11", "port": "8181; }"},
    {"host": "10.214.0.11", "port": 123456},
    {"host": ["10.214.0.11"], "port": 8181},
]


@pytest.fixture
def updater(tmp_path: Path):
    """(run it, the registry folder, the upstreams folder) with nginx and systemctl faked."""
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    script = next(a for a in render_artifacts(c) if a.path.endswith("/clusterbook-upstreams")).text
    registry, upstreams, bin_dir = tmp_path / "endpoints", tmp_path / "upstreams", tmp_path / "bin"
    for folder in (registry, upstreams, bin_dir):
        folder.mkdir()
    script = script.replace(f"REGISTRY={c.storage.endpoint_dir}\n", f"REGISTRY={registry}\n", 1)
    script = script.replace(f"UPSTREAMS={c.gateway.upstream_dir}\n", f"UPSTREAMS={upstreams}\n", 1)
    (tmp_path / "updater").write_text(script)
    for fake in ("nginx", "systemctl"):
        (bin_dir / fake).write_text("#!/bin/bash\n")
        (bin_dir / fake).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(tmp_path / "updater")], env=env, capture_output=True, text=True,
                              timeout=20)
    return run, registry, upstreams


def test_a_record_of_a_node_of_the_tier_is_followed(updater):
    run, registry, upstreams = updater
    (registry / "reasoning.json").write_text(json.dumps({"host": "10.214.0.12", "port": 8181}))
    done = run()
    assert done.returncode == 0, done.stderr
    assert "server 10.214.0.12:8181;" in (upstreams / "reasoning.conf").read_text()
    assert "server 127.0.0.1:9 down;" in (upstreams / "fast.conf").read_text()  # no record: down


@pytest.mark.parametrize("record", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_record_is_not_followed_and_writes_nothing_of_its_own(updater, record):
    run, registry, upstreams = updater
    (registry / "reasoning.json").write_text(json.dumps(record))
    done = run()
    assert done.returncode == 0, done.stderr
    conf = (upstreams / "reasoning.conf").read_text()
    assert conf.splitlines()[1:] == ["upstream clusterbook_reasoning {", "    server 127.0.0.1:9 down;", "}"], conf
    assert "not followed" in done.stdout, done.stdout


@pytest.fixture
def target_writer(tmp_path: Path):
    """(run it, the registry folder, the file_sd folder)."""
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    script = next(a for a in render_artifacts(c) if a.path.endswith("/clusterbook-scrape-targets")).text
    registry, sd = tmp_path / "endpoints", tmp_path / "sd"
    registry.mkdir()
    script = script.replace(f"{c.storage.endpoint_dir}/", f"{registry}/")
    script = script.replace("/etc/prometheus/clusterbook", str(sd))
    (tmp_path / "writer").write_text(script)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(tmp_path / "writer")], capture_output=True, text=True, timeout=20)
    return run, registry, sd


def test_prometheus_gets_the_target_of_a_node_of_the_tier(target_writer):
    run, registry, sd = target_writer
    (registry / "reasoning.json").write_text(json.dumps({"host": "10.214.0.12", "port": 8181, "nodes": "slab[2]"}))
    (registry / "fast.json").write_text(json.dumps({"host": "slab1", "port": 8180, "nodes": "slab1"}))
    assert run().returncode == 0
    assert json.loads((sd / "reasoning.json").read_text()) == [
        {"targets": ["10.214.0.12:8181"], "labels": {"tier": "reasoning", "nodes": "slab[2]"}}]
    fast = json.loads((sd / "fast.json").read_text())
    assert [t["targets"] for t in fast] == [["slab1:8180"]] * 2 and [t["labels"]["model"] for t in fast] == [
        "lab-fast-a", "lab-fast-b"]


@pytest.mark.parametrize("record", HOSTILE, ids=range(len(HOSTILE)))
def test_prometheus_gets_no_target_from_a_hostile_record(target_writer, record):
    run, registry, sd = target_writer
    (registry / "reasoning.json").write_text(json.dumps(record))
    (registry / "fast.json").write_text("{not json")
    done = run()
    assert done.returncode == 0, done.stderr  # one bad record stops no other tier's
    assert json.loads((sd / "reasoning.json").read_text()) == [] and json.loads((sd / "fast.json").read_text()) == []


class Controller:
    """A transport whose controller holds one endpoint record."""

    def __init__(self, text: str):
        self.text = text

    def run(self, node, command, timeout=120):
        from clusterbook.effects.transport import Result
        return Result(node, command, 0, self.text, "")


@pytest.mark.parametrize("record", HOSTILE + ["not json", [1, 2]], ids=range(len(HOSTILE) + 2))
def test_the_operators_side_reads_no_hostile_record(record):
    from clusterbook.effects.probes import registered_endpoint

    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    text = record if isinstance(record, str) else json.dumps(record)
    assert registered_endpoint(Controller(text), c, c.tier("reasoning")) is None
    good = {"host": "10.214.0.12", "port": 8181, "job_id": "7"}
    assert registered_endpoint(Controller(json.dumps(good)), c, c.tier("reasoning")) == good
