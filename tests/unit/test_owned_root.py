"""The folders clusterbook owns on a node (clusterbook/node/owned_root.sh, sent by pure/ownership.py), run for real
here on temporary folders with fakes of rpm and dpkg: a root is created or marked, one that holds files clusterbook
did not make or that a package owns is refused before anything is written, the admin's acceptance is recorded; the
executor claims a node's roots before its first change there; preflight reports each root."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterbook.effects.executor import Executor
from clusterbook.effects.transport import LocalTransport
from clusterbook.model.loader import load_cluster, validate_document
from clusterbook.model.schema import Cluster
from clusterbook.model.yamlsource import parse_yaml
from clusterbook.pure import ownership
from clusterbook.pure.preflight import judge, parse_facts
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion
from tests.conftest import whole_data

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """rpm and dpkg that own the folders listed in $FAKE_DIR/rpm and $FAKE_DIR/dpkg (one per line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rpm").write_text('#!/bin/sh\n# rpm -qf [--qf FMT] PATH\nfor p; do :; done\n'
                                 'grep -qxF "$p" "$FAKE_DIR/rpm" 2>/dev/null || { echo "file $p is not owned by any '
                                 'package"; exit 1; }\necho setup\n')
    (bin_dir / "dpkg").write_text('#!/bin/sh\n# dpkg -S PATH\ngrep -qxF "$2" "$FAKE_DIR/dpkg" 2>/dev/null || '
                                  '{ echo "dpkg-query: no path found matching pattern $2" >&2; exit 1; }\n'
                                  'echo "base-files: $2"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)


def verdicts(roots: list[Path]) -> dict[str, tuple[str, str]]:
    out = run(ownership.command([str(r) for r in roots], "check"))
    assert out.returncode == 0, out.stderr
    return {root: (v, why) for root, v, why in ownership.parse_checks(
        [line.removeprefix("root=") for line in out.stdout.splitlines()])}


def test_the_marker_is_the_node_programs():
    assert f"OWNED_ROOT_MARKER={ownership.MARKER}\n" in ownership.program()


def test_a_missing_or_empty_root_is_claimed_and_a_marked_one_left_as_it_is(fakes):
    missing, empty = fakes / "opt/fjord", fakes / "etc-fjord"
    empty.mkdir()
    assert verdicts([missing, empty]) == {str(missing): ("ok", "missing: created with clusterbook's marker"),
                                          str(empty): ("ok", "empty: marked as clusterbook's")}
    out = run(ownership.command([str(missing), str(empty)], "claim"))
    assert out.returncode == 0, out.stderr
    for root in (missing, empty):
        assert (root / ownership.MARKER).read_text().startswith("clusterbook-root: clusterbook on ")
        assert oct((root).stat().st_mode & 0o777) == "0o755"
    (missing / "bin").mkdir()  # clusterbook's own files since: the marker says whose the folder is
    before = (missing / ownership.MARKER).read_text()
    assert run(ownership.command([str(missing)], "claim")).returncode == 0
    assert (missing / ownership.MARKER).read_text() == before
    assert verdicts([missing])[str(missing)][0] == "ok"


@pytest.mark.parametrize("make, says", [
    (lambda r: (r.mkdir(), (r / "keys").write_text("x")), "holds 1 entries without clusterbook's marker"),
    (lambda r: (r.mkdir(), r.chmod(0o777)), "any user may write it (mode 777)"),
    (lambda r: r.write_text("a file"), "a link or a file"),
    (lambda r: (r.parent.joinpath("elsewhere").mkdir(), r.symlink_to(r.parent / "elsewhere")), "a link or a file"),
    (lambda r: (r.mkdir(), (r.parent / "rpm").write_text(f"{r}\n")), "the package setup owns it"),
    (lambda r: (r.mkdir(), (r.parent / "dpkg").write_text(f"{r}\n")), "the package base-files owns it"),
])
def test_a_folder_that_is_not_clusterbooks_is_refused_and_nothing_is_written(fakes, make, says):
    root = fakes / "profile.d"
    make(root)
    verdict, why = verdicts([root])[str(root)]
    assert verdict == "refused" and says in why
    listing = sorted(p.name for p in fakes.iterdir())
    out = run(ownership.command([str(root)], "claim"))
    assert out.returncode == 1 and re.search(rf"^\S+: {re.escape(str(root))} is not clusterbook's folder: "
                                             rf".*{re.escape(says)}", out.stderr), out.stderr
    assert not (root / ownership.MARKER).exists() and sorted(p.name for p in fakes.iterdir()) == listing
    if "holds" not in says:  # the admin's acceptance covers a folder that holds files, never the rest
        assert run(ownership.command([str(root)], "accept", "ops")).returncode == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_folder_another_user_owns_is_refused(fakes):
    root = fakes / "theirs"
    root.mkdir()
    os.chown(root, 65534, 65534)
    assert verdicts([root])[str(root)][0] == "refused" and "not root" in verdicts([root])[str(root)][1]


def test_the_admin_accepts_a_folder_that_holds_files_once_and_it_is_recorded(fakes):
    root = fakes / "scratch-ai"
    root.mkdir()
    (root / "models").mkdir()
    out = run(ownership.command([str(root)], "accept", "ops@laptop"))
    assert out.returncode == 0 and "holds 1 entries, accepted" in out.stdout
    assert "accepted by ops@laptop on 20" in (root / ownership.MARKER).read_text()
    assert verdicts([root])[str(root)] == ("ok", f"clusterbook's (clusterbook-root: accepted by ops@laptop on "
                                                 f"{(root / ownership.MARKER).read_text().split(' on ')[1].strip()})")


def test_the_executor_claims_a_nodes_roots_before_its_first_change_there(fakes, tmp_path):
    theirs, ours = fakes / "theirs", fakes / "ours"
    theirs.mkdir()
    (theirs / "file").write_text("x")
    wrote = fakes / "wrote"
    step = ExpandedStep("s", "write", "", {"n1": [Command(f"touch {wrote}")]})
    refused = Executor(LocalTransport(), tmp_path / "state",
                       claim=lambda host: ownership.command([str(ours), str(theirs)], "claim")).run(
        Expansion("deploy-x", "t", "", None, [step]))
    assert refused.failure and "claim clusterbook's folders" in refused.failure and "exit status 1" in \
        refused.failure and f"{theirs} is not clusterbook's folder" in refused.failure
    assert not wrote.exists()
    claimed = Executor(LocalTransport(), tmp_path / "state",
                       claim=lambda host: ownership.command([str(ours)], "claim")).run(
        Expansion("deploy-x", "t", "", None, [step]))
    assert claimed.failure is None and wrote.exists() and (ours / ownership.MARKER).exists()


def test_preflight_reports_each_root_and_fails_on_one_that_is_not_clusterbooks():
    c = load_cluster(ROOT / "cluster.yaml")
    node = c.tiers[0].nodes[0]
    roots = ownership.roots_on(c, node)
    assert "/etc/llama" in roots and "/scratch/ai" in roots
    facts = parse_facts("\n".join([f"root={roots[0]}|ok|missing: created with clusterbook's marker",
                                   "root=/scratch/ai|refused|holds 2 entries without clusterbook's marker: if the "
                                   "folder is clusterbook's, invoke accept-folder --folder /scratch/ai records it"]))
    checks = {ch.check: ch for ch in judge(c, node, facts, (0.0, 0.0)) if ch.check.startswith("folder ")}
    assert checks[f"folder {roots[0]}"].verdict == "ok"
    assert checks["folder /scratch/ai"].verdict == "failed" and "accept-folder" in checks["folder /scratch/ai"].found


def test_beefcake2s_roots_by_scope():
    c = load_cluster(ROOT / "cluster.yaml")
    roots = ownership.owned_roots(c)
    assert roots["/opt/clusterbook"] == ("tiers",) and roots["/cluster/shared/ai"] == ("nodes",)
    assert roots["/var/cache/clusterbook"] == ("build",) and "/var/cache/clusterbook" not in ownership.roots_on(
        c, "vasp-02")
    gateway = [r for r, scopes in roots.items() if scopes == ("gateway",)]
    assert gateway and all(r in ownership.roots_on(c, c.gateway.node) for r in gateway)
    assert "/opt/clusterbook" not in ownership.roots_on(c, c.gateway.node)  # slurm-ctl runs no tier
    assert not set(gateway) & set(ownership.roots_on(c, next(n.name for n in c.nodes if n.name != c.gateway.node)))


def test_nodes_claiming_one_shared_root_at_once_all_succeed(fakes):
    shared = fakes / "lustre-llm"
    procs = [subprocess.Popen(["sh", "-c", ownership.command([str(shared)], "claim")], stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    assert [p.wait(timeout=30) for p in procs] == [0] * 8, [p.stderr.read() for p in procs]
    assert [p.name for p in shared.iterdir()] == [ownership.MARKER]


def test_the_node_program_and_the_commands_sent_pass_shellcheck(tmp_path):
    c = load_cluster(ROOT / "cluster.yaml")
    for name, text in [("program.sh", ownership.program()),
                       ("claim.sh", "#!/bin/sh\n" + ownership.claim_command(c, "vasp-01")),
                       ("accept.sh", "#!/bin/sh\n" + ownership.command(["/scratch/ai"], "accept", "ops@laptop"))]:
        (tmp_path / name).write_text(text)
        proc = subprocess.run(["shellcheck", "-s", "sh", str(tmp_path / name)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def test_a_root_that_holds_paths_of_several_scopes_is_claimed_wherever_any_of_them_is_written():
    data = whole_data(ROOT / "cluster.yaml")
    data["engine"]["build_dir"] = "/opt/clusterbook/sources"  # beside the install: the build node is vasp-01
    data["gateway"]["docs_dir"] = "/var/lib/clusterbook/site"  # with the generations: every node's root
    c = validate_document(parse_yaml(yaml.safe_dump(data), "edited.yaml"), Cluster)
    roots = ownership.owned_roots(c)
    assert roots["/opt/clusterbook"] == ("build", "tiers") and roots["/var/lib/clusterbook"] == ("gateway", "nodes")
    assert "/var/lib/clusterbook" in ownership.roots_on(c, c.gateway.node)
