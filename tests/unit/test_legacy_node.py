"""clusterbook-legacy (clusterbook/node/legacy.py) on a fake node: a file tree with /proc, unit files and cron files,
and fakes of systemctl, squeue, scontrol and sbatch. What the earlier setup runs is found by what it runs and what it
touches, recorded once, stopped, and brought back exactly: cron files byte for byte, jobs from their own scripts,
units as they were, processes with their user, folder, environment and output, ports waited for."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

import clusterbook.node

NODE = Path(clusterbook.node.__file__).parent
sys.path.insert(0, str(NODE))
import legacy  # noqa: E402

UPDATER = "/usr/local/bin/ai-inference-upstream.sh"
SCRIPT = "/cluster/shared/scripts/llama-cpp/run-14b.slurm"
LOOK = [UPDATER, SCRIPT, "llama-14b", "llama-server", "rpc-server"]
CRONTAB = "# m h dom mon dow user command\n*/5 * * * * root /usr/local/bin/ai-inference-upstream.sh\n" \
          "0 3 * * * root /usr/bin/logrotate /etc/logrotate.conf\n"
ME = os.getpid()


class FakeNode:
    """systemctl, squeue, scontrol, sbatch and kill over a fake file tree; what each was asked."""

    def __init__(self, root: Path):
        self.root = root
        self.units = {  # unit -> (LoadState, UnitFileState, ActiveState, MainPID)
            "llama-rpc.service": ["loaded", "enabled", "active", "501"],
            "ai-upstream.service": ["loaded", "static", "inactive", "0"],
            "ai-upstream.timer": ["loaded", "enabled", "active", "0"],
            "ai-autostart.service": ["loaded", "enabled", "active", "0"],
            "llama-fast.service": ["loaded", "enabled", "active", "0"],
            "unrelated.service": ["loaded", "enabled", "active", "0"],
        }
        self.queue = [("77", "llama-14b", "root", "ai", "RUNNING", "/cluster/shared")]
        self.asked: list[list[str]] = []

    def put(self, path: str, text: str | bytes, mode: int = 0o644) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
        target.chmod(mode)

    def process(self, pid: int, argv: list[str], uid: int = 0, cgroup: str = "0::/user.slice/session-3.scope",
                ports: tuple[int, ...] = (), out: str | None = None, ppid: int = 1) -> None:
        base = f"/proc/{pid}"
        self.put(f"{base}/cmdline", "\0".join(argv) + "\0")
        self.put(f"{base}/stat", f"{pid} (x) S {ppid} " + " ".join(["0"] * 17) + " 4242 0 0\n")
        self.put(f"{base}/status", f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        self.put(f"{base}/cgroup", cgroup + "\n")
        self.put(f"{base}/environ", "PATH=/usr/bin\0LD_LIBRARY_PATH=/opt/llama.cpp/bin\0")
        (self.root / base.lstrip("/") / "fd").mkdir(exist_ok=True)
        (self.root / base.lstrip("/") / "cwd").symlink_to("/tmp")
        if out:
            (self.root / base.lstrip("/") / "fd" / "1").symlink_to(out)
        for i, port in enumerate(ports):
            (self.root / base.lstrip("/") / "fd" / str(10 + i)).symlink_to(f"socket:[{pid}{i}]")
            self.listen(port, f"{pid}{i}")

    def listen(self, port: int, inode: str) -> None:
        table = self.root / "proc/net/tcp"
        table.parent.mkdir(parents=True, exist_ok=True)
        text = table.read_text() if table.exists() else "  sl  local_address rem_address   st ... inode\n"
        fields = [f"{len(text.splitlines())}:", f"00000000:{port:04X}", "00000000:0000", "0A", "0:0", "0:0", "0",
                  "0", "0", inode]
        table.write_text(text + "   " + " ".join(fields) + "\n")

    def gone(self, pid: int) -> None:
        (self.root / f"proc/{pid}/stat").unlink()
        (self.root / f"proc/{pid}/cmdline").unlink()
        table = self.root / "proc/net/tcp"  # its sockets close with it
        table.write_text("".join(line for line in table.read_text().splitlines(keepends=True)
                                 if not line.split()[-1].startswith(str(pid))))

    def run(self, argv: list[str], timeout: float = 60) -> tuple[int, str, str]:
        self.asked.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            state = self.units.get(argv[-1], ["not-found", "", "inactive", "0"])
            keys = ("LoadState", "UnitFileState", "ActiveState", "MainPID")
            return 0, "".join(f"{k}={v}\n" for k, v in zip(keys, state)), ""
        if argv[0] == "systemctl":
            unit = argv[-1]
            if argv[1] == "disable":
                self.units[unit][1:3] = ["disabled", "inactive"]
            elif argv[1] == "stop":
                self.units[unit][2] = "inactive"
            elif argv[1] == "enable":
                self.units[unit][1] = "enabled"
            elif argv[1] == "start":
                self.units[unit][2] = "active"
            return 0, "", ""
        if argv[0] == "squeue":
            names = argv[argv.index("-n") + 1].split(",")
            rows = [r for r in self.queue if r[1] in names]
            return 0, "".join("|".join(r) + "\n" if "%Z" in argv[-1] else r[0] + "\n" for r in rows), ""
        if argv[:3] == ["scontrol", "write", "batch_script"]:
            Path(argv[4]).write_text("#!/bin/bash\n#SBATCH -J llama-14b\nllama-server -m x\n")
            return 0, "", ""
        if argv[:3] == ["scontrol", "-o", "show"]:
            return 0, f"JobId={argv[-1]} Command={SCRIPT} WorkDir=/cluster/shared\n", ""
        if "sbatch" in argv:
            self.queue.append(("78", "llama-14b", "root", "ai", "PENDING", "/cluster/shared"))
            return 0, "78\n", ""
        raise AssertionError(argv)

    def kill(self, pid: int, sig: int) -> None:
        self.asked.append(["kill", str(pid), str(sig)])
        self.gone(pid)


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setattr(legacy, "ROOT", str(tmp_path))
    monkeypatch.setattr(legacy, "ancestors", lambda: {ME})
    fake = FakeNode(tmp_path)
    unit_dir = "/etc/systemd/system"
    fake.put(f"{unit_dir}/llama-rpc.service", "[Service]\nExecStart=/opt/llama.cpp/build/bin/rpc-server -p 50052\n")
    fake.put(f"{unit_dir}/ai-upstream.service", f"[Service]\nType=oneshot\nExecStart={UPDATER}\n")
    fake.put(f"{unit_dir}/ai-upstream.timer", "[Timer]\nOnUnitActiveSec=30\n")
    fake.put(f"{unit_dir}/ai-autostart.service",  # seed 004's daemon: found by the script it submits
             f"[Service]\nExecStart=/bin/bash -c 'while :; do squeue -h -n llama-14b | grep -q . || sbatch {SCRIPT}; "
             "sleep 60; done'\n")
    fake.put(f"{unit_dir}/llama-fast.service",
             "# Generated by clusterbook from the lab cluster file.\n[Service]\nExecStart=/opt/x/llama-server\n")
    fake.put(f"{unit_dir}/unrelated.service", "[Service]\nExecStart=/usr/bin/sleep infinity\n")
    fake.put("/etc/cron.d/ai-inference", CRONTAB)
    fake.put("/etc/cron.d/other", "0 * * * * root /usr/bin/true\n")
    fake.put("/etc/crontab", "SHELL=/bin/bash\n")
    fake.process(900, ["/opt/llama.cpp/build/bin/rpc-server", "--host", "0.0.0.0", "--port", "50052"],
                 ports=(50052,), out="/root/rpc.log")  # the nohup worker
    fake.process(901, ["/opt/llama.cpp/build/bin/llama-server", "-m", "m.gguf"], cgroup="0::/slurm/uid_0/job_77")
    fake.process(902, ["llama-server", "-m", "mine.gguf"], uid=4321)  # another user's own server
    fake.process(501, ["/opt/llama.cpp/build/bin/rpc-server", "-p", "50053"], ports=(50053,),
                 cgroup="0::/system.slice/llama-rpc.service")
    fake.process(903, ["/opt/x/llama-server"], cgroup="0::/system.slice/llama-fast.service")  # clusterbook's own
    fake.process(904, ["/usr/bin/sleep", "100"])
    fake.process(906, ["/opt/llama.cpp/build/bin/rpc-server", "-p", "50054"], ppid=907)  # started by its wrapper:
    fake.process(907, ["bash", "-c", "while :; do rpc-server -p 50054; done"])  # restarting the wrapper is enough
    return fake


def options(*extra: str) -> dict:
    return legacy.options(["--look", *LOOK, "--unit", "llama-rpc", *extra])  # llama-fast: clusterbook's by its header


FOLDER = "/var/lib/clusterbook/generations/legacy"


def test_record_finds_what_ran_by_what_it_runs_and_touches(node):
    status, lines = legacy.record(FOLDER, options("--job", "llama-14b", "--partition", "ai"), node.run)
    assert status == 0, lines
    found = json.loads((node.root / FOLDER.lstrip("/") / "record.json").read_text())
    units = {u["unit"]: u for u in found["units"]}
    assert set(units) == {"llama-rpc.service", "ai-upstream.service", "ai-upstream.timer", "ai-autostart.service"}
    assert units["llama-rpc.service"]["why"] == "named in the cluster file"
    assert units["llama-rpc.service"]["ports"] == [50053]  # its main process's
    assert units["ai-autostart.service"]["why"] == "runs " + SCRIPT
    assert units["ai-upstream.timer"]["why"] == "starts ai-upstream.service"
    assert found["units"][0]["unit"] == "ai-upstream.timer"  # timers first: nothing restarts a service
    assert [c["file"] for c in found["crons"]] == ["/etc/cron.d/ai-inference"] and found["crons"][0]["lines"] == [1]
    procs = found["processes"]  # not the job's, another user's, a unit's or clusterbook's own
    assert [p["pid"] for p in procs] == [900, 907]
    assert procs[0]["ports"] == [50052] and procs[0]["stdout"] == "/root/rpc.log" and procs[0]["cwd"] == "/tmp"
    assert "LD_LIBRARY_PATH=/opt/llama.cpp/bin" in procs[0]["env"]
    assert found["jobs"][0]["command"] == SCRIPT and found["jobs"][0]["id"] == "77"
    assert (node.root / FOLDER.lstrip("/") / "jobs/77.sh").read_text().startswith("#!/bin/bash")
    assert any("process 900 of root" in line for line in lines)


def test_a_named_unit_the_node_lacks_is_an_error_before_anything_is_written(node):
    status, lines = legacy.record(FOLDER, legacy.options(["--look", *LOOK, "--unit", "llama-head"]), node.run)
    assert status == 2 and lines == ["unit llama-head.service is not on this node (systemd: not-found)"]
    assert not (node.root / FOLDER.lstrip("/")).exists()


def test_a_second_record_keeps_the_first(node):
    legacy.record(FOLDER, options(), node.run)
    node.process(905, ["rpc-server", "-p", "1"])  # started after the first record: clusterbook's own, say
    status, lines = legacy.record(FOLDER, options(), node.run)
    assert status == 0 and "kept" in lines[0]
    assert [p["pid"] for p in json.loads((node.root / FOLDER.lstrip("/") / "record.json").read_text())["processes"]] \
        == [900, 907]


def test_retire_stops_timers_first_comments_cron_lines_and_ends_processes(node):
    legacy.record(FOLDER, options(), node.run)
    assert legacy.retire(FOLDER, True, node.run)[0] == 1  # still running
    status, lines = legacy.retire(FOLDER, False, node.run, kill=node.kill, wait=0)
    assert status == 0, lines
    acts = [a for a in node.asked if a[0] == "systemctl" and a[1] in ("disable", "stop")]
    assert acts[0] == ["systemctl", "disable", "--now", "ai-upstream.timer"]
    assert ["systemctl", "stop", "ai-upstream.service"] in acts  # static: stopped, not disabled
    assert ["kill", "900", str(signal.SIGTERM)] in node.asked and not any(a[:2] == ["kill", "901"] for a in node.asked)
    cron = (node.root / "etc/cron.d/ai-inference").read_text().split("\n")
    assert cron[1].startswith(legacy.CRON_OFF) and cron[2].startswith("0 3")  # only the line that runs the updater
    assert legacy.retire(FOLDER, True, node.run) == (0, ["nothing recorded runs"])
    assert legacy.retire(FOLDER, False, node.run, kill=node.kill, wait=0)[0] == 0  # a second run changes nothing


def test_restore_brings_back_exactly_what_was_recorded(node):
    legacy.record(FOLDER, options("--job", "llama-14b", "--partition", "ai"), node.run)
    legacy.retire(FOLDER, False, node.run, kill=node.kill, wait=0)
    node.queue.clear()  # stop.legacy's jobs step cancelled it
    node.put(SCRIPT, "#!/bin/bash\n#SBATCH -J llama-14b\nllama-server -m x\n")  # the files step put it back
    started = []

    def start(proc):
        started.append(proc)
        node.process(950 + len(started), proc["argv"], ports=tuple(proc["ports"]))

    status, lines = legacy.restore(FOLDER, False, node.run, start=start, wait=0)
    assert status == 0, lines
    assert (node.root / "etc/cron.d/ai-inference").read_text() == CRONTAB  # byte for byte
    submitted = next(a for a in node.asked if "sbatch" in a)
    assert submitted[-1] == SCRIPT and submitted[submitted.index("--chdir") + 1] == "/cluster/shared"
    assert node.units["ai-upstream.timer"][1:3] == ["enabled", "active"]
    assert node.units["ai-upstream.service"][1] == "static"  # was never enabled: left so
    assert [p["pid"] for p in started] == [900, 907] and started[0]["stdout"] == "/root/rpc.log"
    order = [a[-1] for a in node.asked if a[:2] == ["systemctl", "start"]]
    assert order.index("ai-autostart.service") < order.index("ai-upstream.timer")
    assert any(a for a in node.asked if "sbatch" in a) and node.asked.index(submitted) < node.asked.index(
        ["systemctl", "start", "ai-autostart.service"])  # the daemon finds its job queued
    assert not (node.root / FOLDER.lstrip("/") / "record.json").exists()
    assert legacy.restore(FOLDER, True, node.run) == (0, ["nothing to restore in " + FOLDER])


def test_a_changed_job_script_is_submitted_from_the_saved_copy_and_a_port_not_back_fails(node):
    legacy.record(FOLDER, options("--job", "llama-14b", "--partition", "ai"), node.run)
    legacy.retire(FOLDER, False, node.run, kill=node.kill, wait=0)
    node.queue.clear()
    node.put(SCRIPT, "#!/bin/bash\necho something else\n")
    status, lines = legacy.restore(FOLDER, False, node.run, start=lambda proc: None, wait=0)
    submitted = next(a for a in node.asked if "sbatch" in a)
    assert submitted[-1].endswith("/jobs/77.sh")
    assert status == 1 and lines[-1] == "port(s) 50052 held before are not listened on after 0 s"
    assert (node.root / FOLDER.lstrip("/") / "record.json").exists()  # kept: the next run tries again


def test_arguments_are_checked():
    assert legacy.main(["clusterbook-legacy", "record", "relative"]) == 2
    assert legacy.main(["clusterbook-legacy", "erase", "/x"]) == 2
    with pytest.raises(ValueError):
        legacy.options(["stray"])
