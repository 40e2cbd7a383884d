"""A step's status line names its hosts once: after the title, unless the title names every one already."""

import pytest

from clusterbook.effects.reporters import hosts_suffix


@pytest.mark.parametrize(("title", "hosts", "suffix"), [
    ("Configure and build on lab1", ("lab1",), ""),  # it read "Configure and build on lab1 on lab1 … 185 s"
    ("RPC workers on lab2, lab3", ("lab2", "lab3"), ""),
    ("Configure on lab10", ("lab1",), " on lab1"),  # a name inside another is not that name
    ("Environment file on every node of the tier", ("lab1", "lab2"), " on lab1, lab2"),
    ("llama-server on vasp-01.cluster", ("vasp-01",), " on vasp-01"),
])
def test_status_line_names_each_host_once(title, hosts, suffix):
    assert hosts_suffix(title, hosts) == suffix
