"""Every path of the cluster file has a role and a scope, in one table, checked by one function against lists of
what is allowed: where clusterbook may own a folder, which roots may hold what a node executes or trusts, which
paths stay off the shared file system, and where the operator's own files live."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from pydantic import BaseModel

from clusterbook.model.problems import Path
from clusterbook.model.schema import Cluster

# Roles. owned: clusterbook creates, replaces or deletes what is there. executed: a node runs programs or loads
# libraries from it, or a service trusts what it reads there (a world-writable folder would let any user
# substitute them). read: clusterbook only reads it. mount: a shared file system's mount point; clusterbook
# owns folders below it, never the mount. legacy: the earlier setup's file, moved aside (ownedpaths.legacy_findings).
# operator: on the operator's machine, written by ssh.
# Scopes. node-local: each node its own copy, never on the shared file system (nodes would write one folder at
# once); shared: every node sees the same folder; either: the site decides; gateway: the gateway node's;
# operator-side: the machine running invoke.


@dataclass(frozen=True)
class PathRole:
    """What clusterbook does with a path field, and where its value must be."""

    roles: tuple[str, ...]
    scope: str
    what: str  # why, in a few words, for the reference and the messages

    @property
    def text(self) -> str:
        return f"role: {' and '.join(self.roles)}; scope: {self.scope} ({self.what})"


# (schema class, field) -> its role. tests/unit/test_path_roles.py fails when a path field of the schema is missing.
PATH_ROLES: dict[tuple[str, str], PathRole] = {
    ("Engine", "install_dir"): PathRole(("owned", "executed"), "node-local",
                                        "the binaries every tier runs; builds are swapped beside it"),
    ("Engine", "cuda_lib_dir"): PathRole(("executed", "read"), "either", "libraries the servers load"),
    ("Engine", "build_dir"): PathRole(("owned", "executed"), "node-local", "sources and builds, installed from"),
    ("Storage", "models_dir"): PathRole(("owned",), "either", "model files: downloaded, linked or copied in"),
    ("Storage", "log_dir"): PathRole(("owned",), "either", "job and service logs"),
    ("Storage", "endpoint_dir"): PathRole(("owned", "executed"), "either",
                                          "the endpoint registry the gateway trusts"),
    ("Storage", "env_dir"): PathRole(("owned", "executed"), "node-local",
                                     "environment files, job scripts and the keeper that run as services"),
    ("Storage", "generations_dir"): PathRole(("owned",), "node-local", "each node's earlier generations"),
    ("Storage", "shared_dir"): PathRole(("mount",), "shared", "the shared file system"),
    ("Storage", "owned_roots"): PathRole(("root",), "either", "a folder the site gives clusterbook; preflight "
                                                              "confirms no package owns it"),
    ("ApiKeyRef", "file"): PathRole(("owned",), "node-local", "a secret: its group and mode are set"),
    ("Router", "script"): PathRole(("owned", "executed"), "node-local", "the model selector users run"),
    ("Gateway", "upstream_dir"): PathRole(("owned", "executed"), "gateway", "nginx includes its files"),
    ("Gateway", "docs_dir"): PathRole(("owned",), "gateway", "the published site"),
    ("LegacyFile", "path"): PathRole(("legacy",), "either", "moved aside by stop.legacy"),
    ("Legacy", "models_dir"): PathRole(("read",), "either", "model files kept from the earlier setup"),
    ("Access", "key_file"): PathRole(("operator", "read"), "operator-side", "ssh's private key"),
    ("Access", "known_hosts"): PathRole(("operator",), "operator-side", "ssh appends the host keys it accepts"),
}

# A folder of clusterbook's own lies directly in one of these folders (or in storage.shared_dir): the file names it
# in storage.owned_roots, or its name says llama, clusterbook, ai or models. What it holds below is clusterbook's;
# on each node it carries clusterbook's marker (pure/ownership.py), and preflight confirms no package owns it.
OWN_NAME = re.compile(r"(clusterbook|llama|llama\.cpp|ai|models?)([._-][A-Za-z0-9._-]*)?|[A-Za-z0-9._-]+-(llama|ai)")
OWN_PARENTS = ("/opt", "/srv", "/etc", "/etc/nginx", "/var/lib", "/var/cache", "/var/log", "/var/www", "/scratch",
               "/data", "/usr/local/bin", "/usr/local/sbin")
# What a node executes or trusts lies under one of these roots (owned by root on every distribution; never /tmp,
# /var/tmp, /dev/shm or a home folder, where any user may write), or in storage.shared_dir.
TRUSTED_ROOTS = ("/opt/", "/usr/", "/srv/", "/etc/", "/var/lib/", "/var/cache/", "/var/www/", "/scratch/", "/data/")
# Where a shared file system may be mounted.
MOUNT_ROOTS = ("/cluster/", "/shared/", "/scratch/", "/data/", "/nfs/", "/gpfs/", "/lustre/", "/beegfs/", "/mnt/",
               "/srv/", "/home/")
# The operator's own folders: the project's state folder, or ssh's (also as a folder of an absolute path).
OPERATOR_FOLDERS = (".clusterbook/", "~/.clusterbook/", "~/.ssh/")


def inside(path: str, folder: str) -> bool:
    """Whether path is folder or lies below it."""
    folder = folder.rstrip("/") or "/"
    return path == folder or folder == "/" or path.startswith(folder + "/")


def own_folder(path: str, shared_dir: str | None, declared: tuple[str, ...] = ()) -> str | None:
    """The folder of clusterbook's own that holds path (or is it): a root the file declares, or one named as
    clusterbook's; None where there is none."""
    for root in declared:
        if inside(path, root) and not root_findings(root, shared_dir):
            return root.rstrip("/")
    parents = OWN_PARENTS + ((shared_dir.rstrip("/"),) if shared_dir else ())
    parts = path.rstrip("/").split("/")
    for i in range(2, len(parts) + 1):
        folder, name = "/".join(parts[:i]), parts[i - 1]
        if posixpath.dirname(folder) in parents and OWN_NAME.fullmatch(name):
            return folder
    return None


def root_findings(root: str, shared_dir: str | None) -> list[str]:
    """What is wrong with a folder the file declares clusterbook's (empty: allowed): it lies directly in one of the
    parents or in the shared folder, is none of the roots a system keeps, and is not a hidden folder."""
    root = root.rstrip("/")
    parents = OWN_PARENTS + ((shared_dir.rstrip("/"),) if shared_dir else ())
    system = {r.rstrip("/") for r in (*OWN_PARENTS, *TRUSTED_ROOTS, *MOUNT_ROOTS)}
    if posixpath.dirname(root) not in parents or root in system or posixpath.basename(root).startswith("."):
        return [f"{root}: a folder given to clusterbook lies directly in {', '.join(OWN_PARENTS)}"
                + (f" or {shared_dir}" if shared_dir else "") + ", is none of them and is not hidden "
                "(e.g. /etc/fjord-llm, /srv/inference)"]
    if shared_dir and inside(shared_dir, root):
        return [f"{root}: holds the shared file system's mount ({shared_dir}), which is never clusterbook's"]
    return []


def role_findings(value: str, role: PathRole, shared_dir: str | None, declared: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with one path value for its role and scope, the most specific first (empty: allowed)."""
    out = []
    if "root" in role.roles:
        return root_findings(value, shared_dir)
    if "executed" in role.roles and not (value.startswith(TRUSTED_ROOTS)
                                         or (shared_dir and inside(value, shared_dir))):
        out.append(f"{value}: a node runs or trusts what is here, so it must lie under {', '.join(TRUSTED_ROOTS)}"
                   " (never a folder any user may write, such as /tmp or /var/tmp)")
    if role.scope == "node-local" and shared_dir and inside(value, shared_dir):
        out.append(f"{value}: each node keeps its own copy here, so it must not lie on the shared file system "
                   f"({shared_dir}): the nodes would write one folder at once")
    if "owned" in role.roles and not own_folder(value, shared_dir, declared):
        out.append(f"{value}: clusterbook writes and replaces files here, so it must lie in a folder of its own: "
                   "one storage.owned_roots names, or one named for llama, clusterbook, ai or models, directly in "
                   f"{', '.join(OWN_PARENTS)}" + (f" or {shared_dir}" if shared_dir else "")
                   + " (e.g. /opt/llama.cpp/bin, /etc/llama)")
    if "mount" in role.roles and not (value.rstrip("/") + "/").startswith(MOUNT_ROOTS):
        out.append(f"{value}: the shared file system's mount lies under {', '.join(MOUNT_ROOTS)}")
    folders = value.split("/")[:-1]
    if "operator" in role.roles and not ((value.startswith(OPERATOR_FOLDERS) or ".ssh" in folders
                                          or ".clusterbook" in folders) and ".." not in folders):
        out.append(f"{value}: an operator-side file lies in {', '.join(OPERATOR_FOLDERS)} (never a shell's or "
                   "another tool's start-up file)")
    return out


def path_fields(model: BaseModel, at: Path = ()):
    """(location, schema class, field, value) of every path field set in the cluster, depth first."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        where = (*at, name)
        if (type(model).__name__, name) in PATH_ROLES:
            if isinstance(value, str):
                yield where, type(model).__name__, name, value
            for i, item in enumerate(value if isinstance(value, list) else []):  # a list of paths: each at its index
                yield (*where, i), type(model).__name__, name, item
            continue
        items = (value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list)
                 else [(None, value)])
        for key, item in items:
            if isinstance(item, BaseModel):
                yield from path_fields(item, where if key is None else (*where, key))


def path_role_findings(c: Cluster) -> list[tuple[Path, str]]:
    """Every path value that its role and scope do not allow."""
    shared, declared = c.storage.shared_dir, tuple(c.storage.owned_roots)
    out = []
    for where, cls, name, value in path_fields(c):
        role = PATH_ROLES[(cls, name)]
        if "legacy" in role.roles:
            continue  # ownedpaths.legacy_findings: by the earlier setup's own list
        found = role_findings(value, role, shared if (cls, name) != ("Storage", "shared_dir") else None, declared)
        out += [(where, found[0])] if found else []  # the first says enough: one problem per value
    for i, root in enumerate(declared):
        other = next((r for r in declared[:i] if inside(root, r) or inside(r, root)), None)
        if other:
            out.append((("storage", "owned_roots", i), f"{root} is, holds or lies in {other}: each folder given "
                                                       "to clusterbook is named once"))
    parent = posixpath.dirname(c.engine.install_dir.rstrip("/"))  # builds are swapped beside it: owned too
    if not any(where == ("engine", "install_dir") for where, _ in out) and not own_folder(parent, shared, declared):
        out.append((("engine", "install_dir"), f"{c.engine.install_dir}: builds are swapped beside it in {parent}, "
                                               "so that folder must be one of clusterbook's own (e.g. "
                                               "/opt/llama.cpp/bin)"))
    return out
