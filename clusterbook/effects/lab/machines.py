"""Lab nodes as systemd-nspawn containers booted with their own systemd, sshd and static addresses."""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.lab import network
from clusterbook.model.pathroles import inside
from clusterbook.model.schema import Cluster
from clusterbook.pure import ownership
from clusterbook.pure.engine_build import plan_build

STATE = Path("/var/lib/clusterbook-lab")
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_FLOOR = 1024  # the containers' root shares the host root's instances: about 10 a booted node (systemd,
# journald, logind, Prometheus' file discovery), and six labs of three nodes ran past Debian's 128


def raise_inotify_limit(path: Path = INOTIFY_INSTANCES) -> int | None:
    """Give the host's root at least INOTIFY_FLOOR inotify instances: the old limit if it was raised, else None.
    Past the limit a node's programs fail quietly (Prometheus found no SLURM tier to scrape: 'Error adding file
    watcher: too many open files', in CI with six labs booting at once)."""
    old = int(path.read_text())
    if old >= INOTIFY_FLOOR:
        return None
    path.write_text(f"{INOTIFY_FLOOR}\n")
    return old


@dataclass(frozen=True)
class Machine:
    """One lab node on disk: its root file system, pid file and console log."""

    cluster: str
    name: str

    @property
    def root(self) -> Path:
        """The node's root file system as it boots: an overlay of its own layer on the shared base."""
        return STATE / self.cluster / "machines" / self.name

    @property
    def layer(self) -> Path:
        """What the node changed (overlayfs's upper directory) and overlayfs's work directory."""
        return STATE / self.cluster / "layers" / self.name

    @property
    def pid_file(self) -> Path:
        return STATE / self.cluster / "run" / f"{self.name}.pid"

    @property
    def log(self) -> Path:
        return STATE / self.cluster / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        try:  # reap it if this process started it and it has ended
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return None
        except ChildProcessError:
            pass
        # An ended nspawn whose parent (the command that ran lab.up) has not reaped it yet is a zombie: it still
        # answers kill 0, so read its state. Mistaking it for a live node made every power-off in the command
        # that booted the lab wait for the SIGKILL fallback (31 s instead of 2 s).
        return pid if _state(pid) not in (None, "Z", "X") else None

    @property
    def running(self) -> bool:
        return self.pid() is not None


def _state(pid: int) -> str | None:
    """A process's state letter from /proc (R, S, D, Z for a zombie, …), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the command name in (…) may contain spaces


def _marker(machine: Machine) -> Path:
    """The name of the base the node's layer was made on, in the layer itself (it outlives the mount)."""
    return machine.layer / "upper" / ".clusterbook-base"


def outdated(machine: Machine, base: Path) -> bool:
    """Whether the machine's layer was made on another base than this one (the recipe changed)."""
    marker = _marker(machine)  # a root without a layer is a copy of the base from before layers: outdated too
    return (machine.layer.exists() or machine.root.exists()) and not (marker.exists()
                                                                      and marker.read_text() == base.name)


def mount(machine: Machine, base: Path) -> None:
    """The base, read-only, under the node's own layer, at its root: nothing is copied (a copy of the 1.2 GB base
    per node took 25 s of every lab.up, in system time)."""
    if os.path.ismount(machine.root):
        return
    upper, work = machine.layer / "upper", machine.layer / "work"
    for folder in (upper, work, machine.root):
        folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", f"clusterbook-lab-{machine.name}", "-o",
                    f"lowerdir={base},upperdir={upper},workdir={work}", str(machine.root)],
                   check=True, capture_output=True)


def unmount(machine: Machine) -> None:
    """Unmount the node's root (lazily when something still holds it open: the container is already gone)."""
    if os.path.ismount(machine.root) and subprocess.run(["umount", str(machine.root)],
                                                        capture_output=True).returncode != 0:
        subprocess.run(["umount", "--lazy", str(machine.root)], capture_output=True)


def prepare(c: Cluster, machine: Machine, base: Path, public_key: str, host_key: Path) -> None:
    """Mount the node's root file system (its layer over the base) and, the first time, configure hostname,
    addresses, SSH key and host key in its layer."""
    if machine.layer.exists() and not outdated(machine, base):
        mount(machine, base)  # again after the host's reboot; the layer keeps what the node changed
        return
    if machine.running:
        raise RuntimeError(f"{machine.name} runs an older root file system: invoke lab.down, then lab.up")
    unmount(machine)
    shutil.rmtree(machine.layer, ignore_errors=True)
    if machine.root.exists() and not os.path.ismount(machine.root):
        shutil.rmtree(machine.root)  # an empty mount point, or a copy of the base from before layers
    mount(machine, base)
    root = machine.root
    node = c.node(machine.name)
    (root / "etc/hostname").write_text(node.hostname + "\n")
    netdir = root / "etc/systemd/network"
    netdir.mkdir(parents=True, exist_ok=True)
    for i, (net, addr) in enumerate(sorted(node.addresses.items(), key=lambda kv: kv[0] != c.management_network)):
        prefix = ipaddress.ip_network(c.networks[net].subnet).prefixlen
        iface = "host0" if i == 0 else f"{net[:8]}0"
        # sorts before the shipped 80-container-host0.network, so the static address wins
        (netdir / f"10-{iface}.network").write_text(
            f"[Match]\nName={iface}\n\n[Network]\nAddress={addr}/{prefix}\nLinkLocalAddressing=no\n")
    ssh = root / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(public_key)
    (ssh / "authorized_keys").chmod(0o600)
    for suffix in ("", ".pub"):
        shutil.copy2(f"{host_key}{suffix}", root / f"etc/ssh/ssh_host_ed25519_key{suffix}")
    (root / "etc/ssh/ssh_host_ed25519_key").chmod(0o600)
    # shutdown kills what ignores SIGTERM after this long: slurmstepd does, and with systemd's 90 s default a SLURM
    # node's power-off ran into stop()'s 30 s timeout and its SIGKILL (a real node would wait the 90 s)
    conf = root / "etc/systemd/system.conf.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "10-clusterbook-lab.conf").write_text("[Manager]\nDefaultTimeoutStopSec=10s\n")
    (root / ".clusterbook-base").write_text(base.name)  # last: a layer without it is made again


def interfaces(c: Cluster, machine: Machine) -> list[tuple[str, str, str]]:
    """(network, host-side veth, container interface) for every network but the first (nspawn's host0)."""
    nets = sorted(c.node(machine.name).addresses, key=lambda n: n != c.management_network)
    return [(net, network.veth_name(machine.name, net), f"{net[:8]}0") for net in nets[1:]]


def start(c: Cluster, machine: Machine) -> None:
    """Boot the container in the background (its systemd is PID 1 inside)."""
    if machine.running:
        return
    for path in (machine.pid_file, machine.log):
        path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", f"--machine={machine.name}",
            f"--directory={machine.root}", f"--network-bridge={network.bridge_name(c, c.management_network)}",
            "--capability=CAP_IPC_LOCK,CAP_NET_ADMIN", "--console=passive", "--link-journal=no"]
    argv += [f"--network-veth-extra={veth}:{inner}" for _, veth, inner in interfaces(c, machine)]
    if not c.engine.release_url and machine.name == plan_build(c).node:
        # the build node's build tree is the host's cache of it: a lab built again compiles only what changed
        tree = plan_build(c).tree
        Path(tree).mkdir(parents=True, exist_ok=True)
        argv.append(f"--bind={tree}:{tree}")
        for root in (r for r in ownership.owned_roots(c) if inside(tree, r)):  # the bind fills it before any run:
            marker = machine.root / root.lstrip("/") / ownership.MARKER  # the lab accepts it, as an admin would
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("clusterbook-root: accepted by the lab (its host binds the build tree here)\n")
    if c.storage.shared_dir:  # the lab's stand-in for a shared file system: one host directory in every node
        shared = STATE / machine.cluster / "shared"
        shared.mkdir(parents=True, exist_ok=True)
        argv.append(f"--bind={shared}:{c.storage.shared_dir}")
    with machine.log.open("ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    machine.pid_file.write_text(str(proc.pid))
    deadline = time.monotonic() + 20
    pending = interfaces(c, machine)
    while pending and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{machine.name}: systemd-nspawn exited with {proc.returncode}; see {machine.log}")
        for item in list(pending):
            if network.link_exists(item[1]):
                network.attach(c, item[1], item[0])
                pending.remove(item)
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"{machine.name}: veth {pending[0][1]} did not appear; see {machine.log}")


def stop(machine: Machine, veths: list[str] = (), timeout: float = 30) -> None:
    """Power the container off (SIGTERM to nspawn asks its systemd to shut down), then make sure it is gone,
    its host-side veths too: after a SIGKILL the kernel removes them only when the container's network namespace
    is torn down, and a boot that starts before that fails ("File exists")."""
    pid = machine.pid()
    if pid is None:
        machine.pid_file.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and machine.running:
        time.sleep(0.2)
    if machine.running:
        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.5)
    machine.pid_file.unlink(missing_ok=True)
    links = [f"vb-{machine.name}"[:15], *veths]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(network.link_exists(n) for n in links):
        time.sleep(0.2)
    for name in (n for n in links if network.link_exists(n)):
        subprocess.run(["ip", "link", "delete", name], capture_output=True)
