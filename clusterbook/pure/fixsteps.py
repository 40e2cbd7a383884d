"""A troubleshooting entry's fix steps as command lines: rendered from the cluster file's templates, one per host."""

from __future__ import annotations

from clusterbook.model.hosts import resolve_hosts, trouble_hosts, trouble_tiers
from clusterbook.model.schema import Cluster
from clusterbook.model.templating import render_command
from clusterbook.pure import layout
from clusterbook.pure import topology as topo


def fix_step_commands(c: Cluster, trouble, step) -> list[str]:
    """One fix step's command lines, one per host it runs on (`ssh NODE` in front, by the node's alias, where it runs
    on a node)."""
    tier = c.tier(trouble.tier) if trouble.tier else None
    lines = []
    hosts = resolve_hosts(c, trouble_hosts(step.hosts, trouble.tier))
    for host in hosts or [None]:
        ctx = {"cluster": c, "tier": tier, "node": c.node(host) if host else None, "engine": c.engine,
               "units": topo.units(tier) if tier else None,
               "tier_url": topo.client_url(c, tier) if tier else None,  # where its clients ask it
               "jobs": layout.path(c, "jobs"),  # clusterbook-jobs: a tier's own jobs, never another user's
               "rpc_addresses": [e.split(":")[0] for e in topo.rpc_endpoints(c, tier)]
               if tier else []}
        command = render_command(step.run, **ctx)
        lines.append(topo.ssh_route(c, host).short(command) if host else command)
    return lines


def fix_findings(c: Cluster) -> list[tuple[tuple, str]]:
    """Every troubleshooting command that does not render (a variable that is not there, a value it cannot use)."""
    out = []
    for i, written in enumerate(c.troubleshooting):  # an entry for every tier: rendered for each of them
        shown = ([written.model_copy(update={"tier": t.name}) for t in trouble_tiers(c, written)]
                 if written.each_tier else [written])
        for j, step in enumerate(written.fix):
            for trouble in shown:
                try:
                    fix_step_commands(c, trouble, step)
                except Exception as exc:
                    out.append((("troubleshooting", i, "fix", j, "run"), "the command does not render"
                                + (f" for tier {trouble.tier}" if written.each_tier else "")
                                + f": {type(exc).__name__}: {str(exc)[:200]}"))
                    break
    return out


PHONE_WIDTH = 72  # characters a phone shows of a code line at 390 px (issue 67: a 322-character Act line)
BREAKS = (" && ", " || ", " | ", "; ")
CONTINUED = {"": "\\\n    ", '"': "\\\n", "'": "'\\\n'"}  # a line's end and the next one's start, by quoting


def broken(line: str, width: int = PHONE_WIDTH) -> str:
    """A long command line broken into lines that paste as the same command, after an && || | ; where one is near
    the end of a line, else after a space: outside quotes a backslash-newline (the next line indented), inside double
    quotes one with the next line at its first column (the shell removes both, the string is unchanged), inside
    single quotes the string closed and opened again around it ('a '\\ + newline + 'b' is 'a b')."""
    if len(line) <= width:
        return line
    cuts: list[tuple[int, str, bool]] = []  # (index after a space, the quoting there, after an operator)
    quote, i = "", 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if ch in "'\"" and quote in ("", ch):
            quote = "" if quote == ch else ch
        elif ch == " ":
            operator = any(line.startswith(b, i + 1 - len(b)) for b in BREAKS)
            cuts.append((i + 1, quote, operator))
        i += 1
    out, start, column = [], 0, 0
    while len(line) - start + column > width:
        fits = [c for c in cuts if start < c[0] <= start + width - column - 2]
        if not fits:
            break
        near = [c for c in fits if c[2] and c[0] - start > (width - column) // 2]
        cut, q, _ = (near or fits)[-1]
        out.append(line[start:cut] + CONTINUED[q])
        column, start = (4 if q == "" else 0), cut
    out.append(line[start:])
    return "".join(out)
