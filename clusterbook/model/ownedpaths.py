"""Folders clusterbook deletes and replaces in: each must be its own, never a system folder or another's."""

from __future__ import annotations

import posixpath

from clusterbook.model.problems import Path
from clusterbook.model.schema import LEGACY_FOLDERS, Cluster

# Folders of the operating system and its packages: a dedicated folder may lie below one, never be one or hold one.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/cluster", "/scratch", "/data",
    "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/include", "/usr/share", "/usr/src",
    "/usr/local", "/usr/local/bin", "/usr/local/sbin", "/usr/local/lib", "/usr/local/lib64", "/usr/local/share",
    "/usr/local/etc", "/usr/local/include", "/usr/local/src", "/usr/local/cuda",
    "/var/lib", "/var/log", "/var/cache", "/var/tmp", "/var/spool", "/var/run", "/var/lock", "/var/mail",
    "/var/opt", "/var/www", "/var/backups", "/var/local", "/var/lib/clusterbook", "/var/cache/clusterbook",
    "/etc/systemd", "/etc/systemd/system", "/etc/nginx", "/etc/slurm", "/etc/prometheus", "/etc/default",
    "/etc/ssh", "/etc/nftables.d", "/etc/firewalld", "/etc/munge", "/etc/sysconfig", "/etc/llama",
})
# Folders nginx already reads every file of: generated upstreams there would be defined twice.
NGINX_INCLUDED = frozenset({"/etc/nginx", "/etc/nginx/conf.d", "/etc/nginx/sites-enabled",
                            "/etc/nginx/sites-available", "/etc/nginx/modules-enabled", "/etc/nginx/default.d"})


def dedicated_folders(c: Cluster) -> dict[Path, str]:
    """The folders whose entries runbooks remove or move (rm -rf, mv), by the field that sets them."""
    folders: dict[Path, str] = {
        ("engine", "install_dir"): posixpath.dirname(c.engine.install_dir.rstrip("/")),  # b<build>/ go beside it
        ("engine", "build_dir"): c.engine.build_dir,
        ("storage", "generations_dir"): c.storage.generations_dir,
    }
    if c.gateway:
        folders[("gateway", "docs_dir")] = c.gateway.docs_dir
    return {path: folder.rstrip("/") or "/" for path, folder in folders.items()}


def other_folders(c: Cluster) -> dict[Path, str]:
    """Folders clusterbook writes into but does not clear: a dedicated folder may not hold one."""
    folders: dict[Path, str] = {("storage", name): getattr(c.storage, name)
                                for name in ("models_dir", "log_dir", "endpoint_dir", "env_dir", "shared_dir")
                                if getattr(c.storage, name)}
    if c.gateway:
        folders[("gateway", "upstream_dir")] = c.gateway.upstream_dir
    return {path: folder.rstrip("/") or "/" for path, folder in folders.items()}


def inside(path: str, folder: str) -> bool:
    """Whether path is folder or lies below it."""
    return path == folder or folder == "/" or path.startswith(folder + "/")


def folder_findings(c: Cluster) -> list[tuple[Path, str]]:
    """Every dedicated folder that is a system folder, holds one, or holds (or is) another folder of the file."""
    out: list[tuple[Path, str]] = []
    dedicated = dedicated_folders(c)
    for field, folder in dedicated.items():
        what = "install_dir's parent " + folder if field == ("engine", "install_dir") else folder
        held = sorted(s for s in SYSTEM_DIRS if inside(s, folder))
        if held:
            out.append((field, f"{what} is or holds the system folder {held[0]}: clusterbook removes and moves "
                               "entries there, so it must be a folder of its own (e.g. /opt/llama.cpp/bin, "
                               "/var/lib/clusterbook/generations)"))
            continue
        if folder.count("/") < 2:
            out.append((field, f"{what} is a top-level folder: clusterbook removes and moves entries there, so give "
                               "it a folder of its own at least two levels deep"))
            continue
        for other_field, other in {**dedicated, **other_folders(c)}.items():
            if other_field != field and inside(other, folder):
                name = ".".join(map(str, other_field))
                out.append((field, f"{what} holds {name} ({other}): clusterbook removes and moves entries in "
                                   f"{folder}, so no other folder of the cluster file may lie in it"))
    if c.gateway:
        upstream = c.gateway.upstream_dir.rstrip("/")
        if upstream in NGINX_INCLUDED or upstream in SYSTEM_DIRS:
            out.append((("gateway", "upstream_dir"), f"{upstream} is a folder nginx (or the system) already reads "
                                                     "every file of: the generated upstreams would be defined twice; "
                                                     "use a folder of its own, e.g. /etc/nginx/clusterbook"))
    return out


def legacy_findings(c: Cluster) -> list[tuple[Path, str]]:
    """The earlier setup's files, units and jobs that `invoke stop.legacy` would touch: only where they may be (files
    in the folders the seeds used, never a folder itself, never one clusterbook writes), only inference services,
    only jobs in the tiers' own partitions."""
    if not c.legacy:
        return []
    out: list[tuple[Path, str]] = []
    nodes = {n.name for n in c.nodes}
    ours = {*dedicated_folders(c).values(), *other_folders(c).values()} - {c.storage.shared_dir}
    ours_units = {u for t in c.tiers for u in (f"llama-{t.name}", f"llama-rpc-{t.name}",
                                                f"llama-rpc-{t.name}-firewall")}
    allowed = [*LEGACY_FOLDERS] + ([c.storage.shared_dir.rstrip("/") + "/"] if c.storage.shared_dir else [])
    for i, f in enumerate(c.legacy.files):
        where = ("legacy", "files", i)
        name = posixpath.basename(f.path)
        if f.node not in nodes:
            out.append(((*where, "node"), f"unknown node '{f.node}' (nodes: {', '.join(sorted(nodes))})"))
        if not any(f.path.startswith(a) for a in allowed) or f.path.rstrip("/") + "/" in allowed \
                or f.path in SYSTEM_DIRS:
            out.append(((*where, "path"), f"{f.path}: a legacy file must lie in {', '.join(allowed)} (and not be "
                                          "that folder): clusterbook moves it aside, and moves nothing else"))
        elif any(inside(f.path, o) for o in ours) or name.startswith("clusterbook") \
                or name.removesuffix(".service") in ours_units:
            out.append(((*where, "path"), f"{f.path} is a file clusterbook writes itself: it cannot be legacy"))
    for i, u in enumerate(c.legacy.units):
        if u.name in ours_units:
            out.append((("legacy", "units", i, "name"), f"{u.name} is a unit clusterbook runs itself"))
        for j, n in enumerate(u.nodes):
            if n not in nodes:
                out.append((("legacy", "units", i, "nodes", j), f"unknown node '{n}'"))
    if c.legacy.slurm_jobs and not any(t.slurm for t in c.tiers):
        out.append((("legacy", "slurm_jobs"), "jobs are cancelled in the SLURM tiers' partitions only, and no tier "
                                              "runs under SLURM"))
    for i, job in enumerate(c.legacy.slurm_jobs):
        if job in {f"llama-{t.name}" for t in c.tiers}:
            out.append((("legacy", "slurm_jobs", i), f"{job} is a job clusterbook submits itself"))
    return out
