"""Troubleshooting commands an operator pastes at 3 a.m. (issue 32): a diagnosis only looks and returns on its own,
has nothing left to fill in; what acts is marked, and says what it disturbs."""

import pytest

from clusterbook.model.fixlint import fix_lint


@pytest.mark.parametrize("run, act, expected", [
    ("squeue -n llama-reasoning -o '%i %T'", False, []),
    ("sacct --name llama-reasoning --format=JobID,State,ExitCode -P | tail -n 5", False, []),
    ("scontrol requeue $(squeue -h -n llama-reasoning -o %i)", False, ["'scontrol requeue' is not known to only read"]),
    ("scontrol requeue $(squeue -h -n llama-reasoning -o %i)", True, []),
    ("systemctl restart llama-reasoning", False, ["'systemctl restart' is not known to only read"]),
    ("systemctl status llama-reasoning --no-pager", False, []),
    ("invoke models.fetch --dry", False, []),
    ("invoke bench --tier fast --quick", False, ["'invoke bench' is not known to only read"]),
    ("nvidia-smi --query-gpu=memory.used --format=csv -l 2", False, ["never returns"]),
    ("timeout 10 nvidia-smi --query-gpu=memory.used --format=csv -l 2", False, []),
    ("tail -f /var/log/llama/x.log", False, ["never returns"]),
    ("tail -n 40 /var/log/llama/x.log", False, []),
    ("journalctl -u llama-fast -f", False, ["never returns"]),
    ("watch -n 1 squeue", False, ["never returns"]),
    ("sacct -j JOBID --format=JobID -P", False, ["'JOBID' is a placeholder"]),
    ("curl -H 'Authorization: Bearer KEY=...' http://x", False, ["'=...' is a placeholder"]),
    ("sinfo -n NODE", False, ["'NODE' is a placeholder"]),
    ("echo '<node name>'", False, ["'<node name>' is a placeholder"]),
    ("sbatch --export=ALL,GGML_RPC_DEBUG=1 job.sbatch", True, []),  # ALL and an env assignment are not placeholders
    ("nginx -t", False, []),
    ("nginx -s reload", False, ["'nginx -s reload' is not known to only read"]),
    ("tailscale serve status --json", False, []),
    ("tailscale serve --bg 8080", False, ["'tailscale serve --bg 8080' is not known to only read"]),
])
def test_lint(run, act, expected):
    found = fix_lint(run, act)
    assert len(found) == len(expected), found
    for text, want in zip(found, expected):
        assert want in text, found


def test_every_troubleshooting_command_is_shown_in_phone_width_lines_that_paste_as_the_same_command():
    """Issue 67 row 7: the GPU Act command was one 322-character line (a phone showed "scancel … && time"). Each
    long line is broken where the shell removes the break: the same words reach ssh, the same command runs here."""
    import subprocess
    from pathlib import Path

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure import troubles
    from clusterbook.pure.fixsteps import PHONE_WIDTH, broken, fix_step_commands

    def parsed(cmd):
        if cmd.startswith("ssh "):  # one simple command: its words as the shell passes them on
            argv = ["bash", "-c", "printf '%s\\\\0' " + cmd[4:]]
        else:  # the shell's own reprint of the parsed command
            argv = ["bash", "-c", "f() {\n" + cmd + "\n}\ndeclare -f f"]
        done = subprocess.run(argv, capture_output=True, text=True)
        return done.returncode, done.stdout, done.stderr

    c = load_cluster(Path(__file__).resolve().parents[2] / "cluster.yaml")
    lines = {line for t in troubles.entries(c) for step in t.fix for line in fix_step_commands(c, t, step)}
    long = [line for line in lines if len(line) > PHONE_WIDTH]
    assert len(long) >= 20
    for line in long:
        shown = broken(line)
        assert max(map(len, shown.splitlines())) <= PHONE_WIDTH, shown
        assert parsed(shown) == parsed(line), shown
