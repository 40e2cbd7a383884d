"""The lab's base Debian root file system: debootstrap once, cached until its package list changes."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from clusterbook.effects.lab.cachelock import cache_lock
from clusterbook.effects.lab.progress import debootstrap_progress, run_reporting, step

CACHE = Path("/var/cache/clusterbook/rootfs")
SUITE = "bookworm"
# What a node needs to boot, be reached and run the llama.cpp binaries; the tiers are deploy's job.
PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2", "curl", "procps", "ca-certificates",
            "libgomp1", "numactl", "nftables", "python3", "slurm-wlm", "munge", "nginx-light", "jq",
            "prometheus", "prometheus-alertmanager", "prometheus-node-exporter", "iperf3",
            "cmake", "ninja-build", "g++", "patch")  # the build node's tools (no Debian mirror on the nodes)
# Installed but left off: the slurm, gateway and monitoring runbooks enable them on the nodes that need them.
DISABLED = ("slurmctld", "slurmd", "nginx", "prometheus", "prometheus-alertmanager", "prometheus-node-exporter")


def base_dir(cache: Path = CACHE) -> Path:
    key = hashlib.sha256(" ".join((SUITE, *sorted(PACKAGES))).encode()).hexdigest()[:10]
    return cache / f"{SUITE}-{key}"


def ensure_rootfs(cache: Path = CACHE) -> Path:
    """The cached base root file system (built with debootstrap when missing, about 90 s). Both labs may start at
    once on a machine without it: one builds it under a lock while the other waits, then finds it ready."""
    base = base_dir(cache)
    if (base / ".clusterbook-ready").exists():
        return base
    with cache_lock(base, "its debootstrap of the same root file system"):
        if not (base / ".clusterbook-ready").exists():
            _debootstrap(base)
    return base


def _debootstrap(base: Path) -> None:
    """Build the root file system in a folder beside base and move it into place (under the lock)."""
    shutil.rmtree(base, ignore_errors=True)
    tmp = base.with_name(base.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with step(f"debootstrap {SUITE} with {len(PACKAGES)} packages (about 90 s, cached afterwards)") as report:
        run_reporting(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp)],
                      report, debootstrap_progress)
        # Host keys are made per node by the lab (and recorded in known_hosts); drop the ones debootstrap made.
        for key in (tmp / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        subprocess.run(["chroot", str(tmp), "systemctl", "enable", "systemd-networkd"], check=True,
                       capture_output=True)
        subprocess.run(["chroot", str(tmp), "systemctl", "disable", *DISABLED], check=True, capture_output=True)
        (tmp / ".clusterbook-ready").write_text(" ".join(PACKAGES) + "\n")
        tmp.rename(base)
