"""The early-failing waits run by bash with fakes of curl, systemctl, journalctl and sleep: a unit that keeps exiting
fails the wait with its program's own last lines, whatever systemd wrote about the unit after them."""

import os
import subprocess
from pathlib import Path

import pytest

from clusterbook.pure import waits

JOURNAL = """#!/bin/bash
# the program's own lines (_SYSTEMD_UNIT=), or everything about the unit (-u): the program's, then systemd's
program='llama_model_load: error loading model: tensor not found
main: exiting due to model loading error'
cg=/system.slice/llama-reasoning.service
kill="llama-reasoning.service: Failed to kill control group $cg, ignoring: Input/output error"
systemd="$program
$kill
$kill
$kill
$kill
$kill
$kill
llama-reasoning.service: Main process exited, code=exited, status=1/FAILURE
llama-reasoning.service: Failed with result 'exit-code'."
case "$*" in
  *_SYSTEMD_UNIT=llama-reasoning.service*) echo "$program" ;;
  *"-u llama-reasoning"*) n=$(sed -n 's/.*-n \\([0-9]*\\).*/\\1/p' <<< "$*"); echo "$systemd" | tail -n "$n" ;;
esac
"""


@pytest.fixture
def fakes(tmp_path: Path) -> dict:
    for name, body in (("curl", "#!/bin/bash\necho 000\n"), ("systemctl", "#!/bin/bash\necho failed\n"),
                       ("journalctl", JOURNAL), ("sleep", "#!/bin/bash\n"), ("ss", "#!/bin/bash\n")):
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


@pytest.mark.parametrize("wait", [waits.http_or_exited("http://10.0.0.1:8081/health", 200, "llama-reasoning", 2),
                                  waits.port_or_exited(50152, "llama-reasoning", 2)])
def test_a_unit_that_keeps_exiting_fails_the_wait_with_its_programs_last_lines(fakes, wait):
    out = subprocess.run(["bash", "-c", wait], env=fakes, capture_output=True, text=True, timeout=10).stdout
    assert out.startswith(f"{waits.EXITED} llama-reasoning is failed"), out
    assert "exiting due to model loading error" in out, out  # systemd's four lines after it no longer hide it
    assert out.rstrip().endswith("Failed with result 'exit-code'."), out  # and systemd's last word
