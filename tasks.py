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
