"""What apply would change, from facts (host-free): phases in order, files, the engine link, SLURM jobs; and the
Changes page from the change log."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure import generations as gen
from clusterbook.pure import phases as ch
from clusterbook.pure import slurmjob
from clusterbook.pure.apply_history import ChangeRecord, PhaseRecord, Rollback, ScenarioRun, changes_page, from_json

ROOT = Path(__file__).resolve().parents[2]


def converged(c, exps) -> dict[str, ch.NodeFacts]:
    """Facts of a cluster that holds exactly what it renders, its engine linked and its jobs on the scripts."""
    files: dict[str, dict[str, str]] = {}
    for _, e in exps:
        for host, puts in ch.puts(e).items():
            files.setdefault(host, {}).update({f.path: f.sha256 for f in puts})
    jobs = {}
    for phase, e in exps:
        if job := ch.slurm_job(c, phase):
            script = next(f for fs in ch.puts(e).values() for f in fs if f.path.endswith(".sbatch"))
            jobs[job] = slurmjob.script_digest(script.content)
    return {n.name: ch.NodeFacts(files.get(n.name, {}), ch.engine_link(c), jobs) for n in c.nodes}


def test_phases_follow_dependency_order():
    assert [p.name for p in ch.phases(load_cluster(ROOT / "cluster.yaml"))] == [
        "engine", "fast", "reasoning", "router", "gateway", "monitoring"]
    assert [p.name for p in ch.phases(load_cluster(ROOT / "lab/cluster.yaml"))] == [
        "engine", "fast", "reasoning", "embed", "router", "gateway", "monitoring"]
    assert "gateway" not in [p.name for p in ch.phases(load_cluster(ROOT / "tests/clusters/mini.yaml"))]


def test_a_converged_cluster_has_nothing_to_apply():
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    exps = ch.phase_expansions(c)
    assert not any(pp.changed for pp in ch.plan(c, exps, converged(c, exps)))


def test_one_changed_flag_is_one_file_of_one_tier(tmp_path):
    c = load_cluster(ROOT / "lab/cluster.yaml")
    facts = converged(c, ch.phase_expansions(c))
    changed = tmp_path / "cluster.yaml"
    changed.write_text((ROOT / "lab/cluster.yaml").read_text().replace("    ctx_size: 2048\n", "    ctx_size: 1536\n"))
    c2 = load_cluster(changed)
    plans = [pp for pp in ch.plan(c2, ch.phase_expansions(c2), facts) if pp.changed]
    assert [(pp.phase.name, [(x.host, x.what, x.kind) for x in pp.changes]) for pp in plans] == [
        ("reasoning", [("lab1", "/etc/systemd/system/llama-reasoning.service", "changed")])]


def test_a_new_build_moves_the_engine_and_restarts_every_tier_on_it(tmp_path):
    c = load_cluster(ROOT / "lab/cluster.yaml")
    facts = {h: ch.NodeFacts(f.files, "b11000/bin", f.jobs) for h, f in converged(c, ch.phase_expansions(c)).items()}
    plans = {pp.phase.name: pp for pp in ch.plan(c, ch.phase_expansions(c), facts)}
    assert [(x.host, x.before, x.after) for x in plans["engine"].changes] == [
        (h, "b11000/bin", f"{c.engine.tag}/bin") for h in ("lab1", "lab2", "lab3")]
    assert c.engine.tag.startswith("b11434-p")  # the lab runs the patched build (engine.patches)
    assert not plans["reasoning"].changes and plans["reasoning"].engine_hosts == ("lab1", "lab2", "lab3")
    assert not plans["fast"].changes and plans["fast"].engine_hosts and not plans["router"].changed


def test_a_new_build_with_a_changed_flag_is_both_a_deploy_and_a_restart_on_it(tmp_path):
    """A deploy restarts only what its changed files touch (the head whose unit changed, not its workers), so apply
    restarts the tier after it: the phase carries both its changes and the nodes the engine moves on."""
    changed = tmp_path / "cluster.yaml"
    changed.write_text((ROOT / "lab/cluster.yaml").read_text().replace("    ctx_size: 2048\n", "    ctx_size: 1536\n"))
    c = load_cluster(changed)
    before = load_cluster(ROOT / "lab/cluster.yaml")
    facts = {h: ch.NodeFacts(f.files, "b11000/bin", f.jobs)
             for h, f in converged(before, ch.phase_expansions(before)).items()}
    plans = {pp.phase.name: pp for pp in ch.plan(c, ch.phase_expansions(c), facts)}
    assert [x.what for x in plans["reasoning"].changes] == ["/etc/systemd/system/llama-reasoning.service"]
    assert plans["reasoning"].engine_hosts == ("lab1", "lab2", "lab3")



def test_apply_deploys_what_changed_and_restarts_what_the_engine_moved_under(tmp_path, monkeypatch):
    """What apply runs for a phase: its deploy where its files changed, the tier's restart where the engine moved
    under it, both in that order where both (without the restart a changed head came up on the new build beside
    workers still on the old one, and a broken new worker went unnoticed)."""
    from clusterbook.effects import apply_engine
    from clusterbook.effects.apply_engine import ApplyEngine

    monkeypatch.setattr(apply_engine, "mark_verified", lambda *a: 0)  # the nodes' generation marks: not here
    c = load_cluster(ROOT / "lab/cluster.yaml")
    phase = next(p for p in ch.phases(c) if p.name == "reasoning")
    change = ch.Change("lab1", "/etc/systemd/system/llama-reasoning.service", "a", "b")
    ran = []
    engine = ApplyEngine(lambda runbook, *a, **k: ran.append(runbook),
                         lambda *a: ScenarioRun("after", passed=["ok"]), tmp_path)
    for changes, moved, expected in [([change], (), ["deploy-rpc"]), ([], ("lab1",), ["restart"]),
                                     ([change], ("lab1",), ["deploy-rpc", "restart"])]:
        ran.clear()
        rec = engine._change(str(ROOT / "lab/cluster.yaml"), c, ch.PhasePlan(phase, changes, moved),
                             PhaseRecord("reasoning", []), None, tmp_path / "change")
        assert (ran, rec.outcome) == (expected, "landed")


def test_a_change_whose_job_waits_for_vasps_nodes_is_kept_and_the_next_phase_applied(tmp_path, monkeypatch):
    """Issue 64: a tier pending behind VASP is waiting, not failed: apply keeps the change (no scenarios after, no
    rollback, not the verified file yet) and goes on with the next phase; the whole change ends `waiting`."""
    from clusterbook.effects import apply_engine
    from clusterbook.effects.apply_engine import ApplyEngine
    from clusterbook.effects.executor import Report

    monkeypatch.setattr(apply_engine, "mark_verified", lambda *a: 0)
    monkeypatch.setattr(apply_engine, "remember_verified", lambda *a: pytest.fail("a waiting change is not verified"))
    monkeypatch.setattr(apply_engine, "changing", lambda *a: contextlib.nullcontext())
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    plans = [ch.PhasePlan(p, [ch.Change("slab1", f"/etc/llama/{p.name}.env", "a", "b")])
             for p in ch.phases(c) if p.name in ("fast", "reasoning")]
    ran, checked = [], []

    def deploy(runbook, cluster_file, tier=None, **kwargs):
        ran.append(tier)
        return Report(runbook, waiting="job 7 pending (Resources) while other jobs hold its nodes" if tier == "fast"
                      else None)

    def check(cluster_file, phase, when, out):
        checked.append((phase.name, when))
        return ScenarioRun(when, passed=["ok"])
    engine = ApplyEngine(deploy, check, tmp_path)
    monkeypatch.setattr(ApplyEngine, "rollback", lambda *a: pytest.fail("a waiting tier is never rolled back"))
    record = engine.apply(ChangeRecord("lab", str(ROOT / "lab/cluster-slurm.yaml"), "x", "now"), c, plans,
                          tmp_path / "change")
    assert ran == ["fast", "reasoning"] and record.outcome == "waiting"
    assert [(p.phase, p.outcome) for p in record.phases] == [("fast", "waiting"), ("reasoning", "landed")]
    assert ("fast", "after") not in checked and ("reasoning", "after") in checked
    assert record.phases[0].waiting.startswith("job 7 pending")


def test_a_slurm_job_on_an_older_script_is_a_change():
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    exps = ch.phase_expansions(c)
    facts = converged(c, exps)
    controller = next(h for _, e in exps for s in e.steps if s.id == "submit" for h in s.hosts)
    job = next(iter(facts[controller].jobs))
    facts[controller] = ch.NodeFacts(facts[controller].files, facts[controller].engine,
                                     {**facts[controller].jobs, job: "0123456789abcdef"})
    [pp] = [pp for pp in ch.plan(c, exps, facts) if pp.changed]
    assert [(x.what, x.before) for x in pp.changes] == [(f"job {job}", "0123456789abcdef")]


def test_facts_are_read_from_the_nodes_output():
    out = ("a" * 64 + "  /etc/llama/x.env\n" + "engine b11434/bin\njob llama-reasoning 0011223344556677\n"
           "job llama-fast \n")
    facts = ch.facts_from_output(out)
    assert facts.files == {"/etc/llama/x.env": "a" * 64} and facts.engine == "b11434/bin"
    assert facts.jobs == {"llama-reasoning": "0011223344556677", "llama-fast": ""}
    assert ch.facts_from_output("engine -\n").engine == ch.NOT_THERE


def record(started: str, cluster: str = "lab") -> ChangeRecord:
    bad = PhaseRecord("reasoning", [{"host": "lab1", "what": "/etc/x", "before": "aa", "after": "bb"}],
                      "rolled back", "lab1: step 'health' failed",
                      [ScenarioRun("before", ["s1"]), ScenarioRun("after rollback", ["s1"])],
                      Rollback([{"host": "lab1", "generation": "g1", "files": ["/etc/x"], "engine": ""}], 2.5, True))
    return ChangeRecord(cluster, "lab/cluster.yaml", "f" * 64, started, 9.0, "rolled back", [bad])


def test_the_changes_page_shows_this_clusters_runs_latest_first():
    records = [record("2026-11-26T10:00:00Z"), record("2026-11-26T11:00:00Z"), record("2026-11-26T12:00:00Z", "ridge")]
    page = changes_page("lab", [from_json(r.to_json()) for r in records])
    assert page.index("2026-11-26T11:00:00Z") < page.index("2026-11-26T10:00:00Z")
    assert "12:00" not in page  # another cluster's run never shows on this site
    assert "answered again after 2.5 s" in page and "g1 (1 file(s))" in page and "step 'health' failed" in page
    assert "No `invoke apply` has run" in changes_page("beefcake2", records)


def test_rollback_puts_back_newest_first_then_reloads_what_the_files_need():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    newer = gen.Generation("20261128T010000.000000Z-gateway", "gateway", "deploy-gateway", "sha", "t", "applied",
                           files=("/etc/nginx/sites-available/clusterbook",), created=("/etc/nginx/extra.conf",))
    older = gen.Generation("20261127T010000.000000Z-gateway", "gateway", "deploy-gateway", "sha", "t", "applied",
                           files=("/etc/systemd/system/x.service", "/etc/nftables.d/clusterbook.nft"))
    [step] = ch.rollback_expansion(c, "gateway", {"lab1": [newer, older]}).steps
    commands = [cmd.command for cmd in step.hosts["lab1"]]
    assert [cmd.name for cmd in step.hosts["lab1"][:2]] == [f"restore {newer.id}", f"restore {older.id}"]
    assert "rm -f /etc/nginx/extra.conf" in commands[0] and "/etc/nftables.d/clusterbook.nft" in commands[1]
    nft = "/etc/nftables.d/clusterbook.nft"
    assert commands[2:] == ["systemctl daemon-reload", f"if [ -e {nft} ]; then nft -f {nft}; fi",
                            "nginx -t && systemctl reload nginx"]
    assert list(step.hosts) == ["lab1"]


def test_a_tier_rollback_reloads_nothing_itself_and_reaches_every_node_its_deploy_touches():
    c = load_cluster(ROOT / "lab/cluster.yaml")
    g = gen.Generation("20261128T010000.000000Z-fast", "fast", "deploy-fast", "sha", "t", "applied",
                       files=("/etc/clusterbook/fast.env",))
    [step] = ch.rollback_expansion(c, "fast", {"lab1": [g]}).steps
    assert len(step.hosts["lab1"]) == 1  # its restart is the tier's own operation, run after
    reasoning = next(e for p, e in ch.phase_expansions(c) if p.name == "reasoning")
    assert len(ch.phase_hosts(c, reasoning)) > 1  # the head and its workers


def test_a_tier_already_waiting_before_the_change_is_changed_and_kept_waiting(tmp_path, monkeypatch):
    """SLURM lab, issue 64: with VASP holding every node, apply refused to start ("fast fails its scenarios before
    the change"): its scenarios before failed only because its job waits. Waiting scenarios are no failure: the
    change goes on, is kept waiting, and the state before is not marked known good (a waiting tier proves
    nothing). VASP taking the nodes between the deploy and the scenarios after ends it waiting too."""
    from clusterbook.effects import apply_engine
    from clusterbook.effects.apply_engine import ApplyEngine
    from clusterbook.effects.executor import Report

    marked = []
    monkeypatch.setattr(apply_engine, "mark_verified", lambda c, names: marked.extend(names) or 0)
    monkeypatch.setattr(apply_engine, "changing", lambda *a: contextlib.nullcontext())
    monkeypatch.setattr(apply_engine, "known_good_file", lambda *a: "verified.yaml")
    monkeypatch.setattr(ApplyEngine, "rollback", lambda *a: pytest.fail("a waiting tier is never rolled back"))
    c = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    plans = [ch.PhasePlan(p, [ch.Change("slab1", f"/etc/llama/{p.name}.env", "a", "b")])
             for p in ch.phases(c) if p.name in ("fast", "reasoning")]
    deployed = []

    def deploy(runbook, cluster_file, tier=None, **kwargs):
        deployed.append(tier)
        return Report(runbook, waiting="job 8 pending (Resources)" if tier == "fast" else None)

    def check(cluster_file, phase, when, out):  # fast waits throughout; reasoning's nodes are taken after its deploy
        if phase.name == "fast" or when == "after":
            return ScenarioRun(when, waiting=["Every tier is healthy and lists its models"])
        return ScenarioRun(when, passed=["ok"])
    record = ApplyEngine(deploy, check, tmp_path).apply(
        ChangeRecord("lab", str(ROOT / "lab/cluster-slurm.yaml"), "x", "now"), c, plans, tmp_path / "change")
    assert deployed == ["fast", "reasoning"] and record.outcome == "waiting"
    assert [(p.phase, p.outcome) for p in record.phases] == [("fast", "waiting"), ("reasoning", "waiting")]
    assert marked == ["reasoning"]  # its state before was seen healthy; fast's was not
    assert ScenarioRun("x", waiting=["s"]).ok and not ScenarioRun("x", failed=["f"], waiting=["s"]).ok
