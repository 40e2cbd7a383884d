"""Bring the lab described by a cluster file up and down: bridges, nodes, keys, and the model/release source."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.lab import machines, network
from clusterbook.effects.lab.llama_build import sdist, start_in_background
from clusterbook.effects.lab.machines import STATE, Machine
from clusterbook.effects.lab.models import TinyModel, write_model
from clusterbook.effects.lab.progress import step
from clusterbook.effects.lab.rootfs import ensure_rootfs
from clusterbook.model.schema import Cluster

REQUIRED = {"systemd-nspawn": "systemd-container", "mmdebstrap": "mmdebstrap", "ip": "iproute2",
            "ssh": "openssh-client", "ssh-keygen": "openssh-client", "cmake": "cmake", "g++": "g++"}
HTTP_PORT = 8765

# The lab's models, by id in the lab cluster file: small, deterministic, random weights.
LAB_MODELS = {
    "lab-reasoning": TinyModel("lab-reasoning", layers=12, embedding=512, heads=8, kv_heads=4, feed_forward=1536,
                               seed=1),
    "lab-fast-a": TinyModel("lab-fast-a", layers=4, embedding=256, heads=4, kv_heads=2, feed_forward=768, seed=2),
    "lab-fast-b": TinyModel("lab-fast-b", layers=6, embedding=384, heads=6, kv_heads=2, feed_forward=1024, seed=3),
}


def preflight() -> None:
    """Root and the container tools are required; say how to get them."""
    if os.geteuid() != 0:
        raise Failed("the lab needs root (systemd-nspawn, bridges, mmdebstrap): run it as root, e.g. with sudo")
    missing = sorted({pkg for tool, pkg in REQUIRED.items() if shutil.which(tool) is None})
    if missing:
        raise Failed(f"the lab needs {', '.join(missing)}: apt-get install -y {' '.join(missing)}")


@dataclass(frozen=True)
class NodeStatus:
    name: str
    running: bool
    ssh: bool
    detail: str


class Lab:
    """The lab of one cluster file (its name keys the state under /var/lib/clusterbook-lab)."""

    def __init__(self, cluster: Cluster, base_dir: Path = Path(".")):
        self.c = cluster
        self.base_dir = base_dir
        self.state = STATE / cluster.cluster.name
        self.ssh = connect(cluster, base_dir)

    def machine(self, name: str) -> Machine:
        return Machine(self.c.cluster.name, name)

    @property
    def machines(self) -> list[Machine]:
        return [self.machine(n.name) for n in self.c.nodes]

    @property
    def www(self) -> Path:
        return self.state / "www"

    # --- keys ---------------------------------------------------------------------------------
    def _path(self, p: str) -> Path:
        path = Path(os.path.expanduser(p))
        return path if path.is_absolute() else self.base_dir / path

    def ensure_keys(self) -> tuple[str, dict[str, Path]]:
        """The operator key pair, one host key per node, and a known_hosts that lists exactly those."""
        # The key belongs to the lab on this machine (its containers trust it), not to one checkout:
        # it is kept with the lab's state and copied to where the cluster file expects it.
        owned = self.state / "operator" / "id_ed25519"
        owned.parent.mkdir(parents=True, exist_ok=True)
        if not owned.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "clusterbook-lab", "-f",
                            str(owned)], check=True)
        key = self._path(self.c.access.key_file or ".clusterbook/lab/id_ed25519")
        key.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", ".pub"):
            shutil.copy2(f"{owned}{suffix}", f"{key}{suffix}")
        key.chmod(0o600)
        host_keys = {}
        lines = []
        for node in self.c.nodes:
            host_key = self.state / "hostkeys" / node.name
            host_key.parent.mkdir(parents=True, exist_ok=True)
            if not host_key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}",
                                "-f", str(host_key)], check=True)
            host_keys[node.name] = host_key
            pub = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
            names = sorted({node.addresses[self.c.management_network], node.ssh_host or "", node.name} - {""})
            lines.append(f"{','.join(names)} {pub}")
        known = self._path(self.c.access.known_hosts)
        known.parent.mkdir(parents=True, exist_ok=True)
        known.write_text("\n".join(lines) + "\n")
        return Path(f"{key}.pub").read_text(), host_keys

    # --- model and release source --------------------------------------------------------------
    def ensure_source(self) -> None:
        """Generate the lab's models and fetch the llama.cpp source its build node compiles, and serve them over
        HTTP on the host."""
        for model in self.c.models:
            if not model.source:
                continue
            target = self.www / model.source.repo / model.source.files[0]
            if not target.exists():
                if model.id not in LAB_MODELS:
                    raise Failed(f"model {model.id}: the lab only generates {', '.join(LAB_MODELS)}")
                target.parent.mkdir(parents=True, exist_ok=True)
                with step(f"generate model {model.id}"):
                    write_model(LAB_MODELS[model.id], target)
            if model.size_bytes and target.stat().st_size != model.size_bytes:
                raise Failed(f"generated {model.id} is {target.stat().st_size} bytes but the lab cluster file says "
                             f"{model.size_bytes}: update size_bytes in the lab cluster file")
        if self.c.engine.release_url or not self.c.engine.source.tarball:
            raise Failed("the lab's build node compiles llama.cpp from a source tarball the host serves: give the lab "
                         "cluster file engine.source.tarball (and no engine.release_url)")
        served = self.www / "src" / Path(self.c.engine.source.tarball).name
        if not served.exists():
            served.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(sdist(self.c.engine.build), served)
        self._serve()

    def start_build(self) -> None:
        """The build node's llama.cpp tree built on the host meanwhile, in a process of its own (the tree is shared:
        the build node's own steps then wait for it and rebuild what their patch step touches)."""
        log = self.state / "run" / "host-build.log"
        if start_in_background(self.c, log):
            console.print(f"[green]✓[/] llama.cpp {self.c.engine.tag} building on the host meanwhile, for the build "
                          f"node to find (log: {log})")

    def _serve(self) -> None:
        pid_file = self.state / "run" / "http.pid"
        if _alive(pid_file):
            return
        address = network.host_address(self.c, self.c.management_network)
        proc = subprocess.Popen(["python3", "-m", "http.server", str(HTTP_PORT), "--bind", address,
                                 "--directory", str(self.www)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(str(proc.pid))

    # --- lifecycle -------------------------------------------------------------------------------
    def up(self) -> None:
        preflight()
        with step("network: bridges " + ", ".join(network.bridge_name(self.c, n) for n in self.c.networks)):
            network.ensure_bridges(self.c)
        self.start_build()
        raised = machines.raise_inotify_limit()
        if raised is not None:
            console.print(f"[green]✓[/] host: fs.inotify.max_user_instances {raised} → {machines.INOTIFY_FLOOR} "
                          "(the nodes' systemd and Prometheus share root's)")
        base = ensure_rootfs()
        public_key, host_keys = self.ensure_keys()
        self.ensure_source()
        started = []
        for m in self.machines:
            if m.running and machines.outdated(m, base):  # the lab is disposable: bring it to the current recipe
                with step(f"{m.name} runs an older root file system: power it off and build it again"):
                    machines.stop(m, [veth for _, veth, _ in machines.interfaces(self.c, m)])
            machines.prepare(self.c, m, base, public_key, host_keys[m.name])
            if not m.running:
                machines.start(self.c, m)
                started.append(m.name)
        if started:
            with step(f"boot {', '.join(started)} and wait for SSH"):
                self.wait_ssh([m.name for m in self.machines])

    def wait_ssh(self, names: list[str], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                if self.ssh.run(name, "systemctl is-system-running --wait >/dev/null; true", timeout=30).ok:
                    pending.remove(name)
            if pending:
                time.sleep(1)
        if pending:
            raise Failed(f"no SSH to {', '.join(pending)} after {timeout:.0f} s; see "
                         + ", ".join(str(self.machine(n).log) for n in pending))

    def restart(self, name: str) -> tuple[float, float]:
        """Power a node off and boot it again; returns (power-off seconds, boot-until-SSH seconds)."""
        m = self.machine(name)
        self.ssh.close(name)
        started = time.monotonic()
        with step(f"power off {name}"):
            machines.stop(m, [veth for _, veth, _ in machines.interfaces(self.c, m)])
        stopped = time.monotonic()
        machines.start(self.c, m)
        with step(f"boot {name} and wait for SSH"):
            self.wait_ssh([name])
        return stopped - started, time.monotonic() - stopped

    def down(self) -> list[str]:
        """Stop every node and remove bridges, veths, the HTTP source and node file systems (caches stay)."""
        def power_off(m: Machine) -> None:
            self.ssh.close(m.name)
            machines.stop(m, [veth for _, veth, _ in machines.interfaces(self.c, m)])
            machines.unmount(m)

        with ThreadPoolExecutor(max_workers=max(1, len(self.machines))) as pool:  # side by side: 2-10 s each
            list(pool.map(power_off, self.machines))
        pid_file = self.state / "run" / "http.pid"
        if _alive(pid_file):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        network.remove_bridges(self.c)
        shutil.rmtree(self.state, ignore_errors=True)
        return network.leftover_links(self.c, [n.name for n in self.c.nodes])

    def status(self) -> list[NodeStatus]:
        result = []
        for m in self.machines:
            if not m.running:
                result.append(NodeStatus(m.name, False, False, "not running"))
                continue
            r = self.ssh.run(m.name, "systemctl is-system-running; hostname -I", timeout=15)
            result.append(NodeStatus(m.name, True, r.ok or bool(r.stdout), (r.stdout or r.tail()).strip()))
        return result


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False
