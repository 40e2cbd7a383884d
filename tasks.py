"""invoke tasks: parse arguments, call clusterbook.commands. No logic lives here."""

from invoke import Collection, task

from clusterbook import commands
from clusterbook.console import exits_cleanly

CLUSTER_HELP = "cluster file (default: cluster.yaml)"


@task(help={"cluster": CLUSTER_HELP, "out": "output directory (default: build)"})
@exits_cleanly
def render(c, cluster="cluster.yaml", out="build"):
    """Render systemd units, scripts, SLURM jobs, nginx and nftables files into OUT/<node>/<path>."""
    commands.render(cluster, out)


@task(help={"cluster": CLUSTER_HELP})
@exits_cleanly
def check(c, cluster="cluster.yaml"):
    """Validate the cluster file and check every rendered file with systemd-analyze, shellcheck, nginx -t, nft."""
    commands.check(cluster)


ns = Collection(render, check)


@task(help={"cluster": CLUSTER_HELP, "tier": "only this tier", "json": "print JSON instead of tables",
            "models_dir": "local directory with the GGUF files: read exact tensor sizes from their headers"})
@exits_cleanly
def plan(c, cluster="cluster.yaml", tier=None, json=False, models_dir=None):
    """Capacity plan: memory per device, largest context, decode bound and prompt estimate per tier."""
    commands.plan(cluster, tier, json, models_dir)


@task
@exits_cleanly
def reference(c):
    """Rewrite the cluster file reference in README.md from the schema."""
    commands.write_reference("README.md")


ns.add_task(reference)
ns.add_task(plan)


LAB_HELP = "lab cluster file (default: lab/cluster.yaml)"


@task(name="up", help={"cluster": LAB_HELP})
@exits_cleanly
def lab_up(c, cluster=commands.LAB_CLUSTER):
    """Boot the lab: containers with systemd and sshd on bridges, llama.cpp build and models served (cached)."""
    commands.lab_up(cluster)


@task(name="down", help={"cluster": LAB_HELP})
@exits_cleanly
def lab_down(c, cluster=commands.LAB_CLUSTER):
    """Stop the lab and remove its containers, bridges and veths (build and root file system caches stay)."""
    commands.lab_down(cluster)


@task(name="status", help={"cluster": LAB_HELP})
@exits_cleanly
def lab_status(c, cluster=commands.LAB_CLUSTER):
    """Show every lab node: container running, reachable over SSH, system state and addresses."""
    commands.lab_status(cluster)


@task(name="restart", help={"node": "node name", "cluster": LAB_HELP})
@exits_cleanly
def lab_restart(c, node, cluster=commands.LAB_CLUSTER):
    """Power a lab node off and boot it again; wait until SSH answers."""
    commands.lab_restart(cluster, node)


@task(name="ssh", help={"node": "node name", "cluster": LAB_HELP})
@exits_cleanly
def lab_ssh(c, node, cluster=commands.LAB_CLUSTER):
    """Open a shell on a lab node (host key checked against the lab's known_hosts)."""
    c.run(" ".join(commands.ssh_command(cluster, node)), pty=True)


lab = Collection("lab", lab_up, lab_down, lab_status, lab_restart, lab_ssh)
ns.add_collection(lab)
