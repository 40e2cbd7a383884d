"""The preflight command: every node's facts (GPUs, driver, free space, RPC interface, clock) judged against the
cluster file, alone or before a deploy. Light on purpose: a deploy imports it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from rich.table import Table

from clusterbook.commands.arguments import nodes_named
from clusterbook.effects.connections import connect
from clusterbook.effects.console import Failed, console
from clusterbook.effects.transport import Result
from clusterbook.model.loader import load_cluster
from clusterbook.pure.preflight import Check, facts_command, judge, parse_facts


def judged(cluster, node: str, out: Result, asked: tuple[float, float]) -> list[Check]:
    """What the facts command printed on a node (alone, or in a deploy's look-ahead), judged against the file."""
    if not out.ok:
        return [Check(node, "reachable", "the facts command runs over SSH",
                      f"exit {out.returncode}: {out.tail(2) or out.stdout[-200:]}", "failed")]
    return judge(cluster, node, parse_facts(out.stdout), asked)


def preflight_checks(cluster, nodes: list[str]) -> list:
    """Run the facts command on each node at once and judge what it printed against the cluster file."""
    transport = connect(cluster)

    def one(node: str) -> list[Check]:
        started = time.time()
        out = transport.run(node, facts_command(cluster, node), timeout=60)
        return judged(cluster, node, out, (started, time.time()))

    with console.status(f"preflight of {', '.join(nodes)} …"), ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        return [c for result in pool.map(one, nodes) for c in result]


def print_preflight(cluster, nodes: list[str], checks: list, quiet: bool = False) -> None:
    """The table (only the failures' when quiet), then a line; failures end the command naming node and figures."""
    failed = [c for c in checks if c.verdict == "failed"]
    if failed or not quiet:
        table = Table("node", "check", "expected", "found", "verdict", title=f"preflight: {cluster.cluster.name}")
        style = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]", "skipped": "[dim]skipped[/]"}
        for c in checks:
            if c.verdict == "failed" or not quiet:
                table.add_row(c.node, c.check, c.expected, c.found, style[c.verdict])
        console.print(table)
    if failed:
        raise Failed("preflight failed: " + "; ".join(f"{c.node}: {c.check}: expected {c.expected}, found {c.found}"
                                                      for c in failed))
    skipped = sum(c.verdict == "skipped" for c in checks)
    console.print(f"[green]preflight passed[/] on {', '.join(nodes)}"
                  + (f" ({skipped} check(s) skipped: invoke preflight shows why)" if quiet and skipped else ""))


def preflight(cluster_file: str, only: str | None = None) -> None:
    """Every node's GPUs, driver, free space for its models, RPC interface and clock, against the cluster file."""
    cluster = load_cluster(cluster_file)
    nodes = nodes_named(cluster, only) or [n.name for n in cluster.nodes]
    print_preflight(cluster, nodes, preflight_checks(cluster, nodes))
