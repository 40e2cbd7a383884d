"""bench.recovery's page cache evictor, run by bash on this machine with fakes of pgrep, dd and fincore: it waits for
the head to exit, drops the model file until under 5 % is resident, and keeps what it left, not what the next head
has read back by the time it is asked."""

import os
import subprocess
import time
from pathlib import Path

from clusterbook.effects import recovery
from clusterbook.effects.transport import LocalTransport
from clusterbook.model.loader import load_cluster

ROOT = Path(__file__).resolve().parents[2]
FINCORE = """#!/bin/bash
# resident and size of the file, call by call: two drops without effect, one that works, then the next head's reads
n=$(cat {calls} 2>/dev/null || echo 0); echo $((n + 1)) > {calls}
case $n in 0|1) echo "800 1000" ;; 2) echo "30 1000" ;; *) echo "500 1000" ;; esac
"""


def test_the_evictor_keeps_the_share_it_left_once_the_head_exited(tmp_path, monkeypatch):
    head = subprocess.Popen(["sleep", "0.3"])  # the running head, about to exit
    fakes = {"pgrep": f"#!/bin/bash\necho {head.pid}\n", "dd": "#!/bin/bash\n",
             "fincore": FINCORE.format(calls=tmp_path / "calls")}
    for name, body in fakes.items():
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(recovery, "EVICTED", str(tmp_path / "evicted"))
    c = load_cluster(ROOT / "lab/cluster.yaml")
    transport = LocalTransport()
    recovery.evict_when_head_exits(c, transport, c.tier("reasoning"))
    assert (tmp_path / "calls").exists() is False  # nothing dropped while the head runs
    head.wait()
    deadline = time.monotonic() + 10
    while not (tmp_path / "evicted").exists() or not (tmp_path / "evicted").read_text().strip():
        assert time.monotonic() < deadline, "the evictor wrote nothing"
        time.sleep(0.05)
    assert recovery.evicted_share(transport, c.tier("reasoning")) == 0.03
    assert (tmp_path / "calls").read_text().strip() == "3"  # it stopped dropping once under 5 %
