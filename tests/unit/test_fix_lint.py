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
