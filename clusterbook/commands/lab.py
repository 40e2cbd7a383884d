"""Commands on the lab: up (optionally with SLURM), status, down, restart, and ssh into a node."""

from __future__ import annotations

from rich.table import Table

from clusterbook.commands.arguments import node_named
from clusterbook.commands.runbooks import run_runbook
from clusterbook.commands.settings import Settings
from clusterbook.effects.console import Failed, console
from clusterbook.effects.lab.lab import Lab
from clusterbook.effects.ssh import ssh_argv
from clusterbook.model.loader import load_cluster


def _lab(cluster_file: str):
    return Lab(load_cluster(cluster_file))


def lab_up(s: Settings, cluster_file: str, slurm: bool = False) -> None:
    """Build (cached) and boot the lab; a no-op when it is already up. With slurm, configure SLURM too."""
    lab = _lab(cluster_file)
    try:
        lab.up()
    except RuntimeError as exc:
        raise Failed(str(exc)) from None
    if slurm:
        run_runbook(s, "slurm", cluster_file, quiet_recap=True)
    lab_status(cluster_file)


def lab_status(cluster_file: str) -> None:
    lab = _lab(cluster_file)
    table = Table("node", "container", "ssh", "state / addresses", title=f"lab {lab.c.cluster.name}")
    rows = lab.status()
    for s in rows:
        table.add_row(s.name, "[green]running[/]" if s.running else "[red]stopped[/]",
                      "[green]ok[/]" if s.ssh else "[red]no[/]", s.detail.replace("\n", "  "))
    console.print(table)
    if not all(s.running and s.ssh for s in rows):
        raise Failed("not every lab node is running and reachable (invoke lab.up)")


def lab_down(cluster_file: str) -> None:
    left = _lab(cluster_file).down()
    if left:
        raise Failed(f"left behind after lab.down: {', '.join(left)}")
    console.print("[green]lab is down[/]: no containers, bridges or veths left (caches kept)")


def lab_restart(cluster_file: str, node: str) -> None:
    lab = _lab(cluster_file)
    lab.restart(node_named(lab.c, node))
    console.print(f"[green]{node} is back[/]")


def ssh_command(cluster_file: str, node: str) -> list[str]:
    """The ssh argv for an interactive session on a node of the cluster file."""
    cluster = load_cluster(cluster_file)
    return ssh_argv(cluster, node_named(cluster, node))
