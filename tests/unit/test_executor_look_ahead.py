"""The executor's look-ahead, run for real through bash on this machine: a converged run asks each host once for
every digest and check; after the first change, or a guarded command that ran, the steps check live again."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterbook.effects.executor import Executor
from clusterbook.effects.transport import LocalTransport
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion, PutFile


class Counting(LocalTransport):
    """bash on this machine, counting the commands and uploads each host gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def run(self, host, command, timeout=120, stdin=None):
        self.calls.append((host, command))
        return super().run(host, command, timeout, stdin)

    def put(self, host, path, content, mode, timeout=120):
        self.calls.append((host, f"put {path}"))
        Path(path).write_bytes(content)
        return super().run(host, "true")


def expansion(tmp: Path) -> Expansion:
    """Two steps on two hosts: a file each, a guarded command each (its check: a marker file exists), a wait each
    (until the file has the host's name)."""
    def actions(host: str) -> list:
        return [PutFile(str(tmp / f"{host}.conf"), f"{host}\n", 0o644),
                Command(f"touch {tmp}/{host}.ran", unless=f"test -e {tmp}/{host}.ok", changed_when="always"),
                Command(f"cat {tmp}/{host}.conf", until=host, changed_when="never", probe=True)]
    steps = [ExpandedStep(f"s{i}", f"step {i}", "", {h: actions(h) for h in ("a", "b")}) for i in (1, 2)]
    return Expansion("look-ahead", "look-ahead", "", None, steps)


def converge(tmp: Path) -> None:
    for host in ("a", "b"):
        (tmp / f"{host}.conf").write_text(f"{host}\n")
        (tmp / f"{host}.ok").write_text("")


def test_a_converged_run_asks_each_host_once(tmp_path):
    converge(tmp_path)
    hosts = Counting()
    report = Executor(hosts, tmp_path / "state").run(expansion(tmp_path))
    assert report.failure is None
    assert {o.status for o in report.outcomes} == {"ok"} and len(report.outcomes) == 12
    assert sorted(h for h, _ in hosts.calls) == ["a", "b"]  # one round trip each, nothing per step


def test_a_look_ahead_asked_before_the_run_is_not_asked_again(tmp_path):
    """run_runbook asks for it beside the preflight's round trip, then hands it to run()."""
    converge(tmp_path)
    hosts = Counting()
    executor = Executor(hosts, tmp_path / "state")
    known = executor.look_ahead(expansion(tmp_path))
    assert len(hosts.calls) == 2
    report = executor.run(expansion(tmp_path), known)
    assert report.failure is None and {o.status for o in report.outcomes} == {"ok"}
    assert len(hosts.calls) == 2  # nothing more: every answer came from the look-ahead
    (tmp_path / "a.ok").unlink()  # an answer it gave is what the run acts on, not a live check
    assert executor.run(expansion(tmp_path), known).count("a", "changed") == 0


@pytest.mark.parametrize("differs", ["file", "check"])
def test_after_a_change_the_steps_check_live(tmp_path, differs):
    converge(tmp_path)
    if differs == "file":
        (tmp_path / "a.conf").write_text("old\n")
    else:
        (tmp_path / "a.ok").unlink()
    hosts = Counting()
    report = Executor(hosts, tmp_path / "state").run(expansion(tmp_path))
    assert report.failure is None
    changed = [(o.step, o.host) for o in report.outcomes if o.status == "changed"]
    if differs == "file":  # uploaded once; step 2 then finds it in place by a live digest
        assert changed == [("s1", "a")]
        assert ("a", "put " + str(tmp_path / "a.conf")) in hosts.calls
        assert any(h == "b" and c.startswith("sha256sum ") for h, c in hosts.calls)  # live after the change
        assert any(h == "a" and c.startswith("cat ") for h, c in hosts.calls)  # the wait too
    else:  # the guarded command runs in both steps (its check still fails), each time checked live in step 2
        assert changed == [("s1", "a"), ("s2", "a")]
        assert sum(1 for h, c in hosts.calls if h == "a" and c == f"test -e {tmp_path}/a.ok") == 1
    assert (tmp_path / "a.conf").read_text() == "a\n"


def test_a_host_whose_look_ahead_fails_is_checked_step_by_step(tmp_path):
    converge(tmp_path)

    class Refusing(Counting):
        def run(self, host, command, timeout=120, stdin=None):
            if "echo 'H done'" in command:
                self.calls.append((host, "look-ahead"))
                return super().run(host, "exit 3")
            return super().run(host, command, timeout, stdin)

    hosts = Refusing()
    report = Executor(hosts, tmp_path / "state").run(expansion(tmp_path))
    assert {o.status for o in report.outcomes} == {"ok"}
    assert sum(1 for h, c in hosts.calls if h == "a" and c.startswith("sha256sum ")) == 2


def test_one_more_read_travels_in_the_same_round_trip(tmp_path):
    """A deploy's preflight facts ride in the look-ahead: each host is asked once, and answers both."""
    converge(tmp_path)
    hosts = Counting()
    executor = Executor(hosts, tmp_path / "state")
    facts = {"a": "echo avail=1; echo now=2", "c": "echo 'os=debian|12'"}  # c: a host the run has no step on
    known, replies = executor.ask_ahead(expansion(tmp_path), facts)
    assert sorted(h for h, _ in hosts.calls) == ["a", "b", "c"]
    assert known == executor.look_ahead(expansion(tmp_path))  # the answers are as without it
    # the facts' lines among the checks' (which run beside them and may print between them: each is read by line)
    assert {"avail=1", "now=2"} <= set(replies["a"].result.stdout.splitlines())
    assert replies["c"].result.stdout == "os=debian|12\n"
    assert "avail" not in replies["b"].result.stdout and 0 < replies["b"].asked[0] <= replies["b"].asked[1]
