"""Commands a person reads reach a node by its alias (issue 47 item 3): `ssh NODE "…"` with the remote command a few
characters in, quoted so that the shell hands over exactly the command; `invoke ssh-config` writes the aliases."""

import re
import shlex

import pytest

from clusterbook.effects.ssh import ssh_config_text
from clusterbook.model.loader import load_cluster
from clusterbook.pure import troubles
from clusterbook.pure.fixsteps import fix_step_commands
from clusterbook.pure.topology import quoted_for_people, ssh_route
from tests.inprocess import run_invoke

from ..conftest import CLUSTERS, ROOT


@pytest.mark.parametrize("remote, shown", [
    ("ss -tlnp | grep ':50052 '", "\"ss -tlnp | grep ':50052 '\""),  # single quotes inside: double quotes outside
    ("squeue -n x -o '%i %T'", "\"squeue -n x -o '%i %T'\""),
    ("plain command", "'plain command'"),
    ("uptime", "uptime"),
    ('f=$(ls -t); tail "$f"', "'f=$(ls -t); tail \"$f\"'"),  # $ must not expand here: single quotes
    ("echo '$HOME'", "'echo '\"'\"'$HOME'\"'\"''"),  # both: shlex's way
    ("a 'b' \\ c", "'a '\"'\"'b'\"'\"' \\ c'"),
    ("say 'hi!'", "'say '\"'\"'hi!'\"'\"''"),  # ! is history expansion in an interactive bash
])
def test_a_command_is_quoted_for_people_and_the_shell_hands_it_over_whole(remote, shown):
    assert quoted_for_people(remote) == shown
    assert shlex.split(shown) == [remote]


def test_every_shown_ssh_line_uses_an_alias_of_the_ssh_config(beefcake2):
    hosts = set(re.findall(r"^Host (\S+)$", ssh_config_text(beefcake2, ROOT), re.M))
    lines = [line for t in troubles.entries(beefcake2) for step in t.fix
             for line in fix_step_commands(beefcake2, t, step)
             if line.startswith("ssh ")]
    assert lines
    for line in lines:
        alias = line.split()[1]
        assert alias in hosts and not alias.startswith("-"), line
        assert shlex.split(line)[:2] == ["ssh", alias] and len(shlex.split(line)) == 3, line
    route = ssh_route(beefcake2, "vasp-03")
    assert route.short("uptime") == "ssh vasp-03 uptime"  # shlex leaves a plain word bare
    assert route.command("uptime").startswith("ssh -o ConnectTimeout=10 -J ")  # the full line, on Hardware


def test_ssh_config_prints_or_writes_the_aliases_and_keeps_others_files(tmp_path):
    printed = run_invoke("ssh-config", "--cluster", str(CLUSTERS["ridge"]))
    assert printed.returncode == 0, printed.stderr
    ridge = load_cluster(CLUSTERS["ridge"])
    assert {f"Host {n.name}" for n in ridge.nodes} <= set(printed.stdout.splitlines())
    out = tmp_path / "clusterbook-ridge"
    wrote = run_invoke("ssh-config", "--cluster", str(CLUSTERS["ridge"]), "--out", str(out))
    assert wrote.returncode == 0 and out.read_text() == printed.stdout and "Include" in wrote.stdout
    mine = tmp_path / "config"
    mine.write_text("Host work\n    HostName 10.9.9.9\n")
    refused = run_invoke("ssh-config", "--cluster", str(CLUSTERS["ridge"]), "--out", str(mine))
    assert refused.returncode == 1 and "clusterbook did not write it" in refused.stdout + refused.stderr
    assert mine.read_text() == "Host work\n    HostName 10.9.9.9\n"
