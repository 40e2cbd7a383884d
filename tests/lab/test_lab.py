"""The lab boots real containers (systemd, sshd), survives a node restart with its services, and goes away cleanly."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from clusterbook.effects.lab import network
from clusterbook.effects.ssh import SshTransport
from clusterbook.model.loader import load_cluster
from tests.inprocess import run_invoke

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab/cluster.yaml"

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("systemd-nspawn"),
                                 reason="the lab needs root and systemd-nspawn")]


def invoke(*args, timeout=1800):
    return run_invoke(*args, timeout=timeout)


@pytest.fixture(scope="module")
def cluster():
    return load_cluster(LAB)


def test_lab_lifecycle(cluster):
    up = invoke("lab.up")
    assert up.returncode == 0, up.stdout + up.stderr
    ssh = SshTransport(cluster, ROOT)

    # lab.up again is a no-op: nothing boots, and it is quick
    started = time.monotonic()
    again = invoke("lab.up")
    assert again.returncode == 0, again.stderr
    assert "boot" not in again.stdout and time.monotonic() - started < 60

    status = invoke("lab.status")
    assert status.returncode == 0 and status.stdout.count("running") >= 3

    # every node answers over SSH as itself, on both networks
    for node in cluster.nodes:
        result = ssh.run(node.name, "hostname; ip -4 -o addr show")
        assert result.ok, result.stderr
        assert result.stdout.split()[0] == node.hostname
        for address in node.addresses.values():
            assert f"inet {address}/" in result.stdout

    # host keys are checked: a known_hosts with another key for the node refuses the connection
    bad = ROOT / ".clusterbook/lab/bad_known_hosts"
    bad.write_text(f"{cluster.node('lab2').addresses['management']} ssh-ed25519 "
                   "AAAAC3NzaC1lZDI1NTE5AAAAIGm2vJmZUHq2lmxLqWbQh3YcE8U0n2s1TbdVwV8jDmT+\n")
    wrong = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={bad}", "-o",
                            "StrictHostKeyChecking=yes", "-o", "ControlPath=none", "-i",
                            str(ROOT / ".clusterbook/lab/id_ed25519"),
                            f"root@{cluster.node('lab2').addresses['management']}",
                            "true"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in wrong.stderr

    # an enabled service comes back after the node restarts
    unit = ("[Unit]\nDescription=probe\n[Service]\nExecStart=/bin/sleep infinity\n"
            "[Install]\nWantedBy=multi-user.target\n")
    assert ssh.run("lab3", f"printf '{unit}' > /etc/systemd/system/cb-probe.service && "
                           "systemctl enable --now cb-probe").ok
    boot_id = ssh.run("lab3", "cat /proc/sys/kernel/random/boot_id").stdout
    restart = invoke("lab.restart", "lab3")
    assert restart.returncode == 0, restart.stderr
    after = ssh.run("lab3", "cat /proc/sys/kernel/random/boot_id; systemctl is-active cb-probe ssh")
    assert after.stdout.split()[0] != boot_id.strip(), "lab3 did not reboot"
    assert after.stdout.split()[1:] == ["active", "active"]

    down = invoke("lab.down")
    assert down.returncode == 0, down.stderr
    assert network.leftover_links(cluster, [n.name for n in cluster.nodes]) == []
    assert f"clusterbook-lab/{cluster.cluster.name}/" not in Path("/proc/mounts").read_text()  # the other labs
    # (the SLURM lab's, the soak's) may be running beside it
    assert invoke("lab.status").returncode == 1


def test_lab_refuses_without_root_with_apt_hint(monkeypatch):
    from clusterbook.effects.console import Failed
    from clusterbook.effects.lab import lab

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(Failed, match="needs root"):
        lab.preflight()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "mmdebstrap" else "/usr/bin/" + tool)
    with pytest.raises(Failed, match="apt-get install -y mmdebstrap"):
        lab.preflight()
