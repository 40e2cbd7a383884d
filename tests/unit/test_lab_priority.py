"""What every lab waits for runs ahead of what runs beside it: its session's autogroup nice, and its own."""

import contextlib
import os
import subprocess
import threading

import pytest

from clusterbook.effects.lab import llama_build, priority
from clusterbook.effects.lab.progress import run_reporting

AUTOGROUPS = os.path.exists("/proc/self/autogroup")


def test_a_command_put_ahead_runs_with_its_arguments_in_a_session_at_the_priority():
    before = priority.AUTOGROUP.read_text() if AUTOGROUPS else ""
    shown = subprocess.run(priority.ahead(["sh", "-c", 'echo "$1"; nice; cat /proc/self/autogroup 2>/dev/null || true',
                                           "sh", "two words; $(not run)"]),
                           capture_output=True, text=True, start_new_session=True, check=True).stdout.splitlines()
    assert shown[0] == "two words; $(not run)"  # each argument passed as it is, nothing of it run
    if os.geteuid() == 0:
        assert shown[1] == str(priority.AHEAD)
        if AUTOGROUPS:
            assert shown[2].endswith(f"nice {priority.AHEAD}")
    else:
        assert shown[1] == "0"  # not allowed: it runs all the same
    if AUTOGROUPS:
        assert priority.AUTOGROUP.read_text() == before  # the caller's session as it was


@pytest.mark.skipif(os.geteuid() != 0 or not AUTOGROUPS, reason="needs root and autogroups")
def test_the_hosts_build_process_runs_ahead_in_a_session_of_its_own(tmp_path, monkeypatch):
    """spawn's process (the host's build: every lab waits for it), its build replaced by a report of its priority."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nnice\ncat /proc/self/autogroup\n")
    fake.chmod(0o755)
    monkeypatch.setattr(llama_build.sys, "executable", str(fake))
    monkeypatch.setattr(llama_build.dataclasses, "asdict", lambda job: {})
    before = priority.AUTOGROUP.read_text()
    assert llama_build.spawn(None, tmp_path / "build.log").wait(10) == 0
    shown = (tmp_path / "build.log").read_text().splitlines()
    assert shown[0] == str(priority.AHEAD) and shown[1].endswith(f"nice {priority.AHEAD}")
    assert priority.AUTOGROUP.read_text() == before


def test_an_interrupted_report_stops_the_command_it_runs(tmp_path):
    """^C while mmdebstrap runs in a session of its own (no signal from the terminal reaches it): it is stopped."""
    pid_file = tmp_path / "pid"
    raised = []

    def interrupt(line):
        raise KeyboardInterrupt

    def run():
        try:
            run_reporting(["sh", "-c", f"echo $$ > {pid_file}; echo started; exec sleep 600"], lambda figure: None,
                          interrupt, new_session=True)
        except KeyboardInterrupt as e:
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)  # left running, it would wait for the sleep's 600 s
    pid = int(pid_file.read_text())
    try:
        assert not thread.is_alive() and raised, "the command was left running"
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
