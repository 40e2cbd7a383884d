"""Preflight of a node before anything starts: the facts to gather (one shell command), and the verdicts on them
against the cluster file: GPUs and their memory, the driver's CUDA, free space for the node's models, the RPC
network's interface and MTU, the shared folder, the ports the node's services will take, the SLURM partitions and
QoS the tiers ask for, and the clock."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from clusterbook.model.portcheck import SLURMCTLD_PORT, SLURMD_PORT, SLURMDBD_PORT, SSH_PORT, port_claims
from clusterbook.model.schema import Cluster
from clusterbook.pure import ownership
from clusterbook.pure import topology as topo
from clusterbook.pure.engine_build import build_node
from clusterbook.pure.runbooks import models_for_host

CLOCK_SKEW_S = 2.0  # beyond this, logs of different nodes no longer line up (recovery phases, alerts)
GPU_MEMORY_TOLERANCE = 0.02  # nvidia-smi's memory.total against the cluster file's memory_mib
THEIRS = {SSH_PORT, SLURMD_PORT, SLURMCTLD_PORT, SLURMDBD_PORT}  # held by the node's own daemons: expected
ALERTMANAGER = ("alertmanager", "prometheus-aler")  # EL's release binary; Debian's prometheus-alertmanager, cut
HOLDERS = {  # by the cluster file's field that claims the port (indexes left out): the programs (as ss names them,
    # 15 characters) that may hold it already, being what clusterbook runs there (python3: the hold, the alert
    # journal); a tier's port may also be held by the seeds' llama-server or rpc-server until stop.legacy retires it
    ("gateway", "routes", "port"): ("nginx",), ("gateway", "path_port"): ("nginx",),
    ("gateway", "docs_port"): ("nginx",), ("gateway", "wake_port"): ("python3",),
    ("monitoring",): ALERTMANAGER, ("monitoring", "port"): ("prometheus",),
    ("monitoring", "alertmanager_port"): ALERTMANAGER, ("monitoring", "alert_journal_port"): ("python3",),
    ("monitoring", "node_exporter_port"): ("node_exporter", "prometheus-node"),
}
SEEDS_SERVERS = ("llama-server", "rpc-server")


def holders(c: Cluster, field: tuple) -> tuple[str, ...]:
    """Which programs may already hold a port, by the field that claims it (none: it must be free)."""
    if field[0] == "tiers":
        binary = c.engine.server_binary if field[-1] == "port" else c.engine.rpc_worker_binary
        return (binary[:15], *SEEDS_SERVERS)
    return HOLDERS.get(tuple(part for part in field if not isinstance(part, int)), ())


def node_ports(c: Cluster, node: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(port, what will listen there, the programs that may hold it already) on the node, its own daemons aside."""
    return sorted({(port, what, holders(c, field)) for n, port, what, field in port_claims(c)
                   if n == node and port not in THEIRS})


@dataclass(frozen=True)
class Check:
    """One verdict: what was expected on the node, what was found."""

    node: str
    check: str
    expected: str
    found: str
    verdict: str  # ok | failed | skipped


def facts_command(c: Cluster, node: str) -> str:
    """A shell command printing the node's facts as key=value lines (tools that are missing print nothing)."""
    models_dir = shlex.quote(c.storage.models_dir)
    rpc = topo.address(c, node, c.rpc_network) if c.rpc_network in c.node(node).addresses else ""
    files = " ".join(shlex.quote(m.file) for m in models_for_host(c, node))
    return "; ".join([
        "if command -v nvidia-smi >/dev/null; then "
        "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits "
        "| sed 's/, /|/g; s/^/gpu=/'; "
        "nvidia-smi | sed -n 's/.*CUDA Version: *\\([0-9.]*\\).*/cuda=\\1/p'; "
        # each GPU's NUMA node, from its PCI device (nvidia-smi's 00000000:3B:00.0 is sysfs's 0000:3b:00.0)
        "nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | while read -r b; do "
        "b=$(echo \"${b#0000}\" | tr 'A-F' 'a-f'); echo \"numa=$(cat /sys/bus/pci/devices/$b/numa_node 2>/dev/null)\"; "
        "done; fi",
        "echo \"cpus=$(getconf _NPROCESSORS_ONLN)\"",
        f"d={models_dir}; while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; "
        "echo \"avail=$(df -B1 --output=avail \"$d\" | tail -n 1 | tr -d ' ')\"",
        f"for f in {files}; do [ ! -f {models_dir}/\"$f\" ] || echo \"have=$f|$(stat -c %s {models_dir}/\"$f\")\"; "
        "done" if files else "true",
        f"ip -o addr show to {rpc} | awk '{{print $2}}' | while read -r i; do "
        "echo \"iface=$i|$(cat /sys/class/net/$i/operstate)|$(cat /sys/class/net/$i/mtu)\"; done" if rpc else "true",
        "ip -o link show | awk -F': ' '/state DOWN/ { sub(/@.*/, \"\", $2); print \"down=\" $2 }'",
        "[ ! -r /etc/os-release ] || (. /etc/os-release && echo \"os=$ID|$VERSION_ID\")",
        "[ -z \"$(ls -d /opt/rh/gcc-toolset-* 2>/dev/null)\" ] || ls -d /opt/rh/gcc-toolset-* | sed 's|.*-|toolset=|'",
        *_shared_and_ports(c, node),
        *([ownership.command(ownership.roots_on(c, node), "check")] if ownership.roots_on(c, node) else []),
        "echo \"now=$(date +%s.%N)\"",
    ])


def _shared_and_ports(c: Cluster, node: str) -> list[str]:
    """The shared folder (found, its file system, writable), who holds each port the node's services will take, and
    on the keeper's node the SLURM partitions and QoS there are."""
    out = []
    if c.storage.shared_dir:
        d = shlex.quote(c.storage.shared_dir)
        out.append(f"if [ -d {d} ]; then echo \"shared=$(findmnt -n -o FSTYPE -T {d})|"
                   f"$( [ -w {d} ] && echo writable || echo read-only)\"; else echo shared=missing; fi")
    ports = " ".join(str(p) for p, _, _ in node_ports(c, node))
    if ports:
        out.append(f"for p in {ports}; do echo \"port=$p|$(ss -Hltnp \"sport = :$p\" 2>/dev/null | "
                   "sed -n 's/.*users:((\"\\([^\"]*\\)\".*/\\1/p' | head -n 1)\"; done")
    if c.slurm_tiers and node == c.keeper_node:
        out.append("sinfo -h -o %R 2>/dev/null | sed 's/^/partition=/'; "
                   "sacctmgr -n -P show qos format=name 2>/dev/null | sed 's/^/qos=/'")
    return out


def parse_facts(text: str) -> dict[str, list[str]]:
    facts: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("gpu", "cuda", "avail", "have", "iface", "down", "now", "os", "toolset", "numa", "cpus",
                           "shared", "port", "partition", "qos", "root"):
            facts.setdefault(key, []).append(value.strip())
    return facts


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def numa_checks(c: Cluster, node: str, facts: dict[str, list[str]]) -> list[Check]:
    """Each GPU's declared NUMA node against its PCI device's (-1: the machine has one NUMA node, node 0)."""
    found = facts.get("numa", [])
    declared = [g.numa_node for g in c.node(node).gpu_devices]
    out = []
    for i, want in enumerate(declared):
        if want is None:
            continue
        have = found[i] if i < len(found) else ""
        node_of = 0 if have == "-1" else int(have) if have.lstrip("-").isdigit() else None
        out.append(Check(node, f"GPU {i}'s NUMA node", f"{want} (numa_node; the head binds to it)",
                         "unknown" if node_of is None else f"{node_of}" + (" (one NUMA node)" if have == "-1" else ""),
                         "ok" if node_of == want else "failed"))
    return out


def judge(c: Cluster, node: str, facts: dict[str, list[str]], asked: tuple[float, float]) -> list[Check]:
    """The node's checks, each with what was expected and found. `asked`: this machine's clock when the command
    was sent and when its answer came back."""
    out: list[Check] = []
    system = c.node(node).os
    found_os = (facts.get("os") or ["unknown|"])[0].split("|") + [""]
    out.append(Check(node, "operating system", f"{system.id} {system.version} ({system.family})",
                     f"{found_os[0]} {found_os[1]}".strip(),
                     "ok" if (found_os[0], found_os[1]) == (system.id, system.version) else "failed"))
    if system.gcc_toolset and node == build_node(c) and not c.engine.release_url:
        have = facts.get("toolset", [])
        out.append(Check(node, "compiler", f"gcc-toolset-{system.gcc_toolset} (builds llama.cpp)",
                         ", ".join(f"gcc-toolset-{t}" for t in have) or "none installed yet (deploy.install adds it)",
                         "ok"))
    declared = [(g.model, g.memory_mib) for g in c.node(node).gpus for _ in range(g.count)]
    found = [row.split("|") for row in facts.get("gpu", [])]
    if not declared:
        out.append(Check(node, "GPUs", "none (CPU node)", f"{len(found)} GPU(s)" if found else "none", "skipped"))
    else:
        names = sorted(f"{m} {mib} MiB" for m, mib in declared)
        seen = sorted(f"{r[0]} {r[1]} MiB" for r in found if len(r) >= 2)
        ok = len(found) == len(declared) and all(
            r[0] == m and abs(int(float(r[1])) - mib) <= GPU_MEMORY_TOLERANCE * mib
            for (m, mib), r in zip(sorted(declared), sorted(found)))
        out.append(Check(node, "GPUs", ", ".join(names), ", ".join(seen) or "no nvidia-smi or no GPU",
                         "ok" if ok else "failed"))
        need = c.engine.cuda_version
        have = (facts.get("cuda") or [""])[0]
        if need:
            fits = bool(have) and tuple(map(int, have.split("."))) >= tuple(map(int, need.split(".")))
            driver = found[0][2] if found and len(found[0]) > 2 else "?"
            out.append(Check(node, "driver's CUDA", f"≥ {need} (the build's runtime)",
                             f"{have or 'unknown'} (driver {driver})", "ok" if fits else "failed"))
        out += numa_checks(c, node, facts)
        wanted = c.node(node).nvidia_driver
        if wanted:
            driver = found[0][2] if found and len(found[0]) > 2 else "unknown"
            out.append(Check(node, "NVIDIA driver", wanted, driver, "ok" if driver == wanted else "failed"))
    cpus = (facts.get("cpus") or [""])[0]
    if cpus.isdigit():
        declared_cpus = c.node(node).cpu_cores
        out.append(Check(node, "CPUs", f"{declared_cpus} (cpu_cores; SLURM jobs ask for theirs)", cpus,
                         "ok" if int(cpus) >= declared_cpus else "failed"))
    present = dict(row.split("|", 1) for row in facts.get("have", []))
    needed = sum(max(0, m.bytes - int(present.get(m.file, 0))) for m in models_for_host(c, node))
    avail = int((facts.get("avail") or ["0"])[0] or 0)
    wanted = [m.id for m in models_for_host(c, node)]
    out.append(Check(node, f"free space in {c.storage.models_dir}",
                     f"≥ {_gb(needed)} for {', '.join(wanted)}" if wanted else "nothing to fetch", _gb(avail),
                     "ok" if avail >= needed else "failed"))
    in_rpc = any(t.workers and node in t.nodes for t in c.tiers)
    if in_rpc:
        net = c.networks[c.rpc_network]
        rows = [r.split("|") for r in facts.get("iface", [])]
        expected = f"{topo.address(c, node, c.rpc_network)} on an interface that is up, MTU {net.mtu}"
        if not rows:
            down = facts.get("down", [])
            out.append(Check(node, f"{c.rpc_network} interface", expected, "no interface holds the address"
                             + (f" (down: {', '.join(down)})" if down else ""), "failed"))
        else:
            name, state, mtu = rows[0] + ["?"] * (3 - len(rows[0]))
            # a bridge or veth can report "unknown" while it carries traffic; only "down" is down
            up = state in ("up", "unknown")
            out.append(Check(node, f"{c.rpc_network} interface", expected, f"{name} {state}, MTU {mtu}",
                             "ok" if up and mtu == str(net.mtu) else "failed"))
    out += shared_and_port_checks(c, node, facts)
    for root, verdict, why in ownership.parse_checks(facts.get("root", [])):
        out.append(Check(node, f"folder {root}", "clusterbook's: its marker, or missing, or empty and no package's",
                         why, "ok" if verdict == "ok" else "failed"))
    now = float((facts.get("now") or ["0"])[0] or 0)
    out.append(clock_check(node, now, asked))
    return out


def clock_check(node: str, now: float, asked: tuple[float, float]) -> Check:
    """The node's clock against this machine's: skewed only by how far it falls outside the moments the command
    was sent and answered (it read its clock somewhere between them: a slow round trip is no skew)."""
    sent, answered = asked
    skew = now - answered if now > answered else now - sent if now < sent else 0.0
    took = f"the {answered - sent:.1f} s the answer took"
    found = (f"within {took}" if not skew else f"{skew:+.2f} s beyond {took}") if answered - sent >= 0.1 \
        else f"{skew:+.2f} s"
    return Check(node, "clock", f"within {CLOCK_SKEW_S:g} s of this machine", found,
                 "ok" if abs(skew) <= CLOCK_SKEW_S else "failed")


def shared_and_port_checks(c: Cluster, node: str, facts: dict[str, list[str]]) -> list[Check]:
    """The shared folder is there and writable; each port the node's services take is free or held by what
    clusterbook runs; the partitions and QoS the tiers ask for exist (on the keeper's node)."""
    out: list[Check] = []
    if c.storage.shared_dir:
        kind, _, access = (facts.get("shared") or ["missing"])[0].partition("|")
        out.append(Check(node, f"shared folder {c.storage.shared_dir}", "there and writable (every node sees it)",
                         "not there" if kind == "missing" else f"{kind or '?'}, {access}",
                         "ok" if kind != "missing" and access == "writable" else "failed"))
    held = dict(row.split("|", 1) for row in facts.get("port", []) if "|" in row)
    for port, what, may in node_ports(c, node):
        by = held.get(str(port), "")
        out.append(Check(node, f"port {port}", f"free for {what}", f"held by {by}" if by else "free",
                         "ok" if not by or by in may else "failed"))
    if c.slurm_tiers and node == c.keeper_node:
        have = {"partition": set(facts.get("partition", [])), "qos": set(facts.get("qos", []))}
        ours = {p.name for p in c.slurm.partitions} if c.slurm else set()  # the slurm.conf deploy.slurm writes
        for kind, names in (("partition", {t.slurm.partition for t in c.slurm_tiers}),
                            ("qos", {t.slurm.qos for t in c.slurm_tiers if t.slurm.qos})):
            for name in sorted(names):
                coming = kind == "partition" and name in ours
                found = ("exists" if name in have[kind] else "missing: deploy.slurm writes it (clusterbook's "
                         "slurm.conf)" if coming else "missing (Tiers page: what SLURM must have)")
                out.append(Check(node, f"SLURM {kind} {name}", "exists (the tiers' jobs ask for it)", found,
                                 "ok" if name in have[kind] or coming else "failed"))
    return out
