"""Generations: the shell that records and restores them runs for real here (bash on a temporary folder), and the
choice of what a rollback undoes is table-driven."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterbook.effects.executor import Executor
from clusterbook.effects.transport import LocalTransport
from clusterbook.pure import generations as gen
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion, PutFile


def sh(command: str) -> str:
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def node(tmp_path):
    """A node's folders: the generations, an engine with two builds and a link, a config file."""
    (tmp_path / "opt/b1/bin").mkdir(parents=True)
    (tmp_path / "opt/b2/bin").mkdir(parents=True)
    os.symlink("b1/bin", tmp_path / "opt/bin")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/tier.env").write_text("CTX=2048\n")
    return tmp_path


def recording(node: Path, gid: str, phase: str = "reasoning") -> gen.Recording:
    meta = {"phase": phase, "runbook": "deploy-rpc", "cluster_sha": "abc", "time": "t"}
    return gen.Recording(str(node / "gens"), gid, str(node / "opt/bin"), meta)


def put(node: Path, rec: gen.Recording, path: str, text: str) -> None:
    sh(rec.save(str(node / path)))
    (node / path).write_text(text)


def test_a_deploy_keeps_what_it_replaced_and_rollback_puts_it_back(node):
    rec = recording(node, "20261126T100000.000001Z-deploy-rpc-reasoning")
    sh(rec.begin())
    put(node, rec, "etc/tier.env", "CTX=4096\n")
    put(node, rec, "etc/tier.env", "CTX=8192\n")  # a second upload of the same file keeps the first content
    put(node, rec, "etc/new.nft", "table\n")
    os.remove(node / "opt/bin")
    os.symlink("b2/bin", node / "opt/bin")  # the install moved the engine link
    sh(rec.end())
    [g] = gen.parse_listing(sh(gen.listing_command(str(node / "gens"))))
    assert (g.phase, g.state, g.engine_before, g.engine_after) == ("reasoning", "applied", "b1/bin", "b2/bin")
    assert g.files == (str(node / "etc/tier.env"),) and g.created == (str(node / "etc/new.nft"),)
    assert gen.to_restore([g], "reasoning") == [g]
    sh(gen.restore_command(str(node / "gens"), g, str(node / "opt/bin")))
    assert (node / "etc/tier.env").read_text() == "CTX=2048\n"
    assert not (node / "etc/new.nft").exists()
    assert os.readlink(node / "opt/bin") == "b1/bin"
    [g] = gen.parse_listing(sh(gen.listing_command(str(node / "gens"))))
    assert g.state == "rolled-back" and gen.to_restore([g], "reasoning") == []


def test_a_deploy_that_changed_nothing_leaves_no_generation(node):
    rec = recording(node, "20261126T100000.000001Z-deploy-rpc-reasoning")
    sh(rec.begin())
    sh(rec.end())
    assert gen.parse_listing(sh(gen.listing_command(str(node / "gens")))) == []


def test_only_the_newest_generations_are_kept(node):
    for i in range(gen.KEPT + 3):
        rec = recording(node, f"20261126T1000{i:02d}.000000Z-deploy-rpc-reasoning")
        sh(rec.begin())
        put(node, rec, "etc/tier.env", f"CTX={i}\n")
        sh(rec.end())
    kept = gen.parse_listing(sh(gen.listing_command(str(node / "gens"))))
    assert len(kept) == gen.KEPT and kept[0].id.startswith("20261126T100003")


def test_the_executor_records_a_generation_around_its_uploads(node, tmp_path):
    path = str(node / "etc/tier.env")
    step = ExpandedStep("env", "env", "", {"n1": [PutFile(path, "CTX=1024\n", 0o644), Command("true")]})
    rec = recording(node, "20261126T110000.000000Z-deploy-rpc-reasoning")
    report = Executor(LocalTransport(), tmp_path / "state", recording=rec).run(
        Expansion("deploy-rpc", "t", "", "reasoning", [step], generation=True))
    assert report.failure is None
    [g] = gen.parse_listing(sh(gen.listing_command(str(node / "gens"))))
    assert g.files == (path,) and Path(node / "gens" / g.id / "files" / path.lstrip("/")).read_text() == "CTX=2048\n"


def g(gid: str, phase: str = "reasoning", state: str = "applied") -> gen.Generation:
    return gen.Generation(gid, phase, "r", "sha", "t", state)


@pytest.mark.parametrize("gens, phase, expected", [
    ([g("1", state="verified"), g("2"), g("3")], "reasoning", ["3", "2"]),  # every change since the verified one
    ([g("1"), g("2")], "reasoning", ["2"]),  # nothing verified: the newest only, never a node's first deploy
    ([g("1", state="verified"), g("2", "fast"), g("3")], "reasoning", ["3"]),  # another tier's change stays
    ([g("1", state="verified"), g("2", "engine"), g("3")], "reasoning", ["3", "2"]),  # the engine counts for all
    ([g("1", state="verified"), g("2", state="rolled-back"), g("3")], "reasoning", ["3"]),
    ([g("1"), g("2", state="verified")], "reasoning", []),  # already at a verified state
    ([], "reasoning", []),
])
def test_what_a_rollback_undoes(gens, phase, expected):
    assert [x.id for x in gen.to_restore(gens, phase)] == expected


def test_after_restore_reloads_units_and_rules():
    assert gen.after_restore(["/etc/systemd/system/a.service", "/etc/nftables.d/r.nft", "/etc/llama/a.env"]) == [
        "systemctl daemon-reload", "if [ -e /etc/nftables.d/r.nft ]; then nft -f /etc/nftables.d/r.nft; fi"]
    assert gen.after_restore(["/etc/llama/a.env"]) == []


def test_a_listing_with_a_broken_generation_skips_it():
    text = "== a\nmeta {not json\nstate applied\n== b\nmeta {\"phase\": \"fast\"}\nstate weird\nfile /x\n"
    [only] = gen.parse_listing(text)
    assert (only.id, only.phase, only.state, only.files) == ("b", "fast", "applied", ("/x",))


def test_a_converged_run_costs_no_generation_round_trip(node, tmp_path):
    """Nothing changes: the executor never begins a generation (no extra command on the host)."""
    from clusterbook.effects.transport import Result

    path = str(node / "etc/tier.env")
    seen: list[str] = []

    class Counting(LocalTransport):
        def run(self, host, command, timeout=120, stdin=None) -> Result:
            seen.append(command)
            return super().run(host, command, timeout, stdin)

    step = ExpandedStep("env", "env", "", {"n1": [PutFile(path, "CTX=2048\n", 0o644), Command("true", "true")]})
    rec = recording(node, "20261126T120000.000000Z-deploy-rpc-reasoning")
    Executor(Counting(), tmp_path / "state", recording=rec).run(Expansion("deploy-rpc", "t", "", "reasoning", [step]))
    assert len(seen) == 1 and not (node / "gens").exists(), seen  # the look-ahead only (digest and unless check)
