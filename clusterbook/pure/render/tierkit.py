"""What every kind's files are made of: the library path, the server's command line (numactl in front where the tier
binds to its GPU's NUMA node), a systemd unit, the engine's variables, and an RPC port's firewall rules."""

from __future__ import annotations

from clusterbook.model.schema import Cluster
from clusterbook.pure import flags as fl
from clusterbook.pure import layout
from clusterbook.pure import topology as topo
from clusterbook.pure.layout import path as at
from clusterbook.pure.render.artifact import Artifact, header, template
from clusterbook.pure.render.escaping import Quoted


def ld_library_path(c: Cluster) -> str:
    return ":".join(p for p in (c.engine.install_dir, c.engine.cuda_lib_dir) if p)


def numa_exec(c: Cluster, tier, argv: list[str], numa_fallback: bool = False) -> list[str]:
    """The head's full argv, with numactl in front when the tier binds to the GPU's NUMA node. In a SLURM step
    (numa_fallback) the binding is tried first: where SLURM gave the step CPUs of another NUMA node, numactl would
    fail and the keeper resubmit the job forever, so the head runs unbound and says so."""
    if tier.numa_bind:
        numa = c.node(tier.head).gpu_devices[0].numa_node
        numactl = f"/usr/bin/numactl --cpunodebind={numa} --membind={numa}"
        if numa_fallback:
            script = (f'{numactl} true 2>/dev/null && exec {numactl} "$@"; echo "NUMA node {numa} is outside the '
                      'CPUs or memory SLURM gave this step: the head runs unbound" >&2; exec "$@"')
            return ["bash", "-c", script, "numa"] + argv
        argv = numactl.split() + argv
    return argv


def server_unit(c: Cluster, tier, role: str, flags: list[fl.Flag]) -> Artifact:
    """The server's unit on the tier's head: its flags after the server binary, numactl in front where it binds."""
    argv = numa_exec(c, tier, fl.server_command(c, flags))
    return unit(c, tier, tier.nodes[0], "head_unit", role, argv, tier.systemd, tier.mlock)


def unit(c: Cluster, tier, node: str, ids: str, role: str, argv: list[str],
          settings: object, mlock: bool) -> Artifact:
    text = template("server.service.j2", header=header(c), tier=tier, role=role, docs_url=c.cluster.docs_url,
                    env_file=layout.env_file(c, tier), secrets_file=layout.secrets_file(c, tier), engine=c.engine,
                    exec_start=Quoted(fl.shell_line(argv)), settings=settings, mlock=mlock)
    return Artifact(node, at(c, ids, tier), text, "unit", about=f"{tier.name}: {role}", id=ids, tier=tier.name)


def engine_env(c: Cluster, tier) -> list[tuple[str, str, Quoted]]:
    """The tier's engine variables; what each does is clusterbook's own sentence, written as a comment."""
    return [(key, value, Quoted(about)) for key, value, about in fl.rpc_env(c, tier)]


def rpc_port_rules(c: Cluster, tier, worker: str) -> list[Artifact]:
    """The RPC port's rules, and a unit that loads them at every boot (before the worker or slurmd starts); on an EL
    node, where firewalld runs, a script that opens the port in firewalld instead (permanent rich rules)."""
    allowed = [topo.address(c, n, c.rpc_network) for n in tier.nodes if c.rpc_network in c.node(n).addresses]
    if c.node(worker).os.family == "el":
        text = template("firewalld-open.sh.j2", header=header(c), network=c.rpc_network,
                        address=topo.address(c, worker, c.rpc_network),
                        rules=[{"port": tier.rpc_port, "sources": sorted(set(allowed))}],
                        what=f"Only the nodes of the {tier.name} tier may reach this RPC worker: llama.cpp RPC has no "
                             "authentication.")
        return [Artifact(worker, at(c, "firewalld_script", tier), text, "script", 0o755,
                         about=f"{tier.name}: RPC port open to the tier's nodes only (firewalld)",
                         id="firewalld_script", tier=tier.name)]
    rules = at(c, "rpc_rules", tier)
    text = template("nftables-rpc.nft.j2", header=header(c), tier=tier, table=tier.name.replace("-", "_"),
                    allowed=sorted(set(allowed)))
    unit = template("firewall.service.j2", header=header(c), tier=tier, worker_unit=topo.units(tier).worker,
                    rules=rules)
    return [Artifact(worker, rules, text, "nftables", about=f"{tier.name}: RPC port open to the tier's nodes only",
                     id="rpc_rules", tier=tier.name),
            Artifact(worker, at(c, "firewall_unit", tier), unit, "unit",
                     about=f"{tier.name}: loads the RPC port's rules at boot", id="firewall_unit", tier=tier.name)]
