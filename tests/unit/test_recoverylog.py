"""The phases of a recovery read from journal lines: a real lab capture and hand-made edge cases."""

from pathlib import Path

import pytest

from clusterbook.pure.recoverylog import journal_phases, last_load_s, ordered

FIXTURES = Path(__file__).parent.parent / "fixtures" / "recovery"


def test_a_killed_worker_captured_on_the_lab():
    journals = {who: (FIXTURES / f"worker-killed.{who}.journal").read_text() for who in ("head", "worker")}
    t0 = float((FIXTURES / "worker-killed.t0").read_text())
    phases = journal_phases(journals, t0)
    assert phases == {"head aborted": 0.112, "worker back": 1.187, "head started": 2.384, "loading": 2.397,
                      "model loaded": 2.475}
    assert [name for name, _ in ordered(phases)] == ["head aborted", "worker back", "head started", "loading",
                                                     "model loaded"]


HEAD_RESTART = """\
99.500000 n1 llama-server[7]: 0.00.001.000 I srv  llama_server: model loaded
100.020000 n1 systemd[1]: Stopping llama-x.service - head...
100.030000 n1 systemd[1]: Started llama-x.service - head.
100.040000 n1 llama-server[9]: 0.00.008.000 I srv    load_model: loading model '/srv/models/m.gguf'
100.100000 n1 llama-server[9]: 0.00.070.000 I srv  llama_server: model loaded
-- Boot 1234 --
"""


@pytest.mark.parametrize("journals, t0, expected", [
    # a head restarted by hand: no abort, no worker line; the previous process's "model loaded" is before t0
    ({"head": HEAD_RESTART}, 100.0, {"head started": 0.03, "loading": 0.04, "model loaded": 0.1}),
    # "model loaded" only counts after "loading": a load still under way has no end yet
    ({"head": HEAD_RESTART.replace("I srv    load_model: loading", "I srv  other")}, 100.0, {"head started": 0.03}),
    # a journal with nothing after the disruption: no phases
    ({"head": HEAD_RESTART, "worker": ""}, 200.0, {}),
    # lines that are not short-unix journal lines are skipped
    ({"head": "garbage\n\n-- No entries --\n"}, 0.0, {}),
])
def test_phases(journals, t0, expected):
    assert journal_phases(journals, t0) == expected


SLURM_HEAD_LOG = """\
0.00.006.784 I srv    load_model: loading model '/srv/models/lab-reasoning.gguf'
0.00.077.579 I srv  llama_server: model loaded
0.21.690.166 E send failed (bytes_sent=0, size_to_send=8)
/src/ggml-rpc.cpp:569: Remote RPC server crashed or returned malformed response
0.00.005.283 I srv    load_model: loading model '/srv/models/lab-reasoning.gguf'
0.00.071.074 I srv  llama_server: model loaded
"""


@pytest.mark.parametrize("log, expected", [
    (SLURM_HEAD_LOG, 0.066),  # a requeued job appends: the last process's load, on its own clock
    (SLURM_HEAD_LOG.replace("0.00.071.074", "1.02.071.074"), 62.066),  # minutes count
    (SLURM_HEAD_LOG.rsplit("0.00.071.074", 1)[0], None),  # still loading
    ("", None),
])
def test_last_load_from_a_head_log(log, expected):
    assert last_load_s(log) == expected
