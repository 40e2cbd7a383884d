"""The folders clusterbook owns on each node (its roots) and the commands that judge, claim and accept them there:
the rules live once, in clusterbook/node/owned_root.sh; a root carries clusterbook's marker before anything is
written in it, so a runbook never clears what clusterbook did not create."""

from __future__ import annotations

import posixpath
import shlex
from importlib.resources import files

from clusterbook.model.ownedpaths import FILE_FIELDS, owned_paths
from clusterbook.model.pathroles import own_folder, path_fields
from clusterbook.model.schema import Cluster
from clusterbook.pure.engine_build import build_node

MARKER = ".clusterbook-root"  # the node program's OWNED_ROOT_MARKER (a test holds them equal)
MODES = ("check", "claim", "accept")


SCOPES = ("gateway", "build", "tiers", "nodes")  # the gateway's node; the build node; the tiers' nodes; every node


def owned_roots(c: Cluster) -> dict[str, tuple[str, ...]]:
    """Every root of the paths clusterbook writes, with the scopes of the paths in it: "gateway" (the gateway's
    paths), "build" (the build node's sources), "tiers" (the engine, the models and the tiers' own files) or "nodes"
    (logs, endpoints, environment files and generations, which every node a run changes keeps). A file named as
    clusterbook's (the router's script) is no root."""
    shared, declared = c.storage.shared_dir, tuple(c.storage.owned_roots)
    classes = {where: cls for where, cls, _, _ in path_fields(c)}
    paths = dict(owned_paths(c))
    paths[("engine", "install_dir", "parent")] = posixpath.dirname(c.engine.install_dir.rstrip("/"))  # b-folders
    out: dict[str, set[str]] = {}
    for where, path in paths.items():
        root = own_folder(path, shared, declared)
        if root is None or (root == path.rstrip("/") and (classes.get(where), where[-1]) in FILE_FIELDS):
            continue  # pathroles refuses the file already; or the path is a file, no folder
        scope = ("gateway" if where[0] == "gateway" else "build" if where == ("engine", "build_dir") else
                 "tiers" if where[0] in ("engine", "tiers", "router") or where == ("storage", "models_dir")
                 else "nodes")
        out.setdefault(root, set()).add(scope)
    return {root: tuple(s for s in SCOPES if s in scopes) for root, scopes in sorted(out.items())}


def roots_on(c: Cluster, node: str) -> list[str]:
    """The roots a node holds: the gateway's on its node, the sources on the build node, the tiers' on the nodes
    that run them, the rest on every node."""
    on = {"gateway": {c.gateway.node} if c.gateway else set(), "build": {build_node(c)},
          "tiers": {n for t in c.tiers for n in t.nodes}, "nodes": {n.name for n in c.nodes}}
    return [root for root, scopes in owned_roots(c).items() if any(node in on[s] for s in scopes)]


def program() -> str:
    """The node program's text (its rules), sent before the call: nothing of clusterbook's is on a new node."""
    return (files("clusterbook.node") / "owned_root.sh").read_text()


def command(roots: list[str], mode: str, who: str | None = None) -> str:
    """A shell command running the node program on roots: check prints a verdict per root, claim creates or marks
    them (failing at one that is not clusterbook's), accept also marks one that holds files, naming who."""
    assert mode in MODES
    args = [mode] + ([who or "the admin"] if mode == "accept" else []) + roots
    return program() + "\nowned_root " + " ".join(shlex.quote(a) for a in args)


def claim_command(c: Cluster, node: str) -> str | None:
    """What runs on a node before a run's first change there (None: the node holds no root)."""
    roots = roots_on(c, node)
    return command(roots, "claim") if roots else None


def parse_checks(lines: list[str]) -> list[tuple[str, str, str]]:
    """(root, verdict, why) from the check mode's `root=` values."""
    out = []
    for value in lines:
        root, _, rest = value.partition("|")
        verdict, _, why = rest.partition("|")
        if verdict in ("ok", "refused"):
            out.append((root, verdict, why))
    return out
