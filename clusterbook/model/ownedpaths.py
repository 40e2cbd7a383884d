"""Folders clusterbook clears and replaces in, kept apart from each other, and the earlier setup's files, units and
jobs that stop.legacy may touch: each by a list of what is allowed (pathroles.py says where a path may lie)."""

from __future__ import annotations

import posixpath
import re

from clusterbook.model.pathroles import PATH_ROLES, inside, own_folder, path_fields
from clusterbook.model.problems import Path
from clusterbook.model.schema import LEGACY_FOLDERS, LEGACY_UNIT, Cluster


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


def owned_paths(c: Cluster) -> dict[Path, str]:
    """Every path of the file that clusterbook writes (pathroles' owned role), by its field."""
    return {where: value.rstrip("/") or "/" for where, cls, name, value in path_fields(c)
            if "owned" in PATH_ROLES[(cls, name)].roles}


def folder_findings(c: Cluster) -> list[tuple[Path, str]]:
    """A folder clusterbook clears that holds another path of the file (or is it): clearing it would take that
    path's files too."""
    out: list[tuple[Path, str]] = []
    others = owned_paths(c)
    for field, folder in dedicated_folders(c).items():
        if not own_folder(folder, c.storage.shared_dir, tuple(c.storage.owned_roots)):
            continue  # pathroles refuses it already
        what = "install_dir's parent " + folder if field == ("engine", "install_dir") else folder
        for other_field, other in others.items():
            if other_field != field and inside(other, folder):
                name = ".".join(map(str, other_field))
                out.append((field, f"{what} holds {name} ({other}): clusterbook removes and moves entries in "
                                   f"{folder}, so no other folder of the cluster file may lie in it"))
    return out


FILE_FIELDS = {("ApiKeyRef", "file"), ("Router", "script")}  # owned paths that are one file, not a folder


def apart_findings(c: Cluster) -> list[tuple[Path, str]]:
    """Folders clusterbook writes hold one kind of file each: no two are the same or lie one in the other, no file
    is one of them, and the earlier setup's models folder, which it only reads, is none of them, holds none and
    lies in none."""
    out: list[tuple[Path, str]] = []
    owned = [(where, cls, name, value.rstrip("/") or "/") for where, cls, name, value in path_fields(c)
             if "owned" in PATH_ROLES[(cls, name)].roles]
    for j, (where, cls, name, value) in enumerate(owned):
        for other, other_cls, other_name, before in owned[:j]:
            files = {(cls, name), (other_cls, other_name)} & FILE_FIELDS
            clash = value == before if files else inside(value, before) or inside(before, value)
            if clash:  # named at both, since either may be the edit
                for at, path, (by, its) in ((where, value, (other, before)), (other, before, (where, value))):
                    out.append((at, f"{path} is, holds or lies in {'.'.join(map(str, by))} ({its}): each folder "
                                    "clusterbook writes holds one kind of file"))
    if c.legacy and c.legacy.models_dir:
        kept = c.legacy.models_dir.rstrip("/") or "/"
        for where, _, _, value in owned:
            if inside(value, kept) or inside(kept, value):
                out.append((("legacy", "models_dir"), f"{kept} is, holds or lies in {'.'.join(map(str, where))} "
                                                      f"({value}): the earlier setup's models are only read, from a "
                                                      "folder clusterbook does not write"))
                break
    return out


def _inference_named(path: str, folder: str) -> bool:
    """Whether a part of path below folder is named as an inference service's (llama…, ai-…, vllm…, ollama…)."""
    below = path[len(folder.rstrip("/")):].strip("/").split("/")
    return any(re.fullmatch(LEGACY_UNIT, part.removesuffix(".service")) for part in below)


def legacy_findings(c: Cluster) -> list[tuple[Path, str]]:
    """The earlier setup's files, units and jobs that `invoke stop.legacy` would touch: a file only in the folders
    the seeds used, below them named as an inference service's, never holding or inside a path clusterbook writes;
    a unit only an inference service's, never clusterbook's; jobs only by name and owner, in the tiers'
    partitions."""
    if not c.legacy:
        return []
    out: list[tuple[Path, str]] = []
    nodes = {n.name for n in c.nodes}
    ours = owned_paths(c)
    ours_units = {u for t in c.tiers for u in (f"llama-{t.name}", f"llama-rpc-{t.name}",
                                                f"llama-rpc-{t.name}-firewall")}
    allowed = [*LEGACY_FOLDERS] + ([c.storage.shared_dir.rstrip("/") + "/"] if c.storage.shared_dir else [])
    for i, f in enumerate(c.legacy.files):
        where = ("legacy", "files", i)
        name = posixpath.basename(f.path).removesuffix(".service")
        folder = next((a for a in allowed if f.path.startswith(a)), None)
        if f.node not in nodes:
            out.append(((*where, "node"), f"unknown node '{f.node}' (nodes: {', '.join(sorted(nodes))})"))
        if folder is None or not _inference_named(f.path, folder):
            out.append(((*where, "path"), f"{f.path}: a legacy file lies in {', '.join(allowed)} and is named, or "
                                          "lies in a folder named, as an inference service's (llama…, ai-…, "
                                          "vllm…, ollama…): clusterbook moves it aside, and moves nothing else"))
        elif any(inside(o, f.path) or inside(f.path, o) for o in ours.values()) or name.startswith("clusterbook") \
                or name in ours_units:
            out.append(((*where, "path"), f"{f.path} is, holds or lies in a path clusterbook writes itself: it "
                                          "cannot be legacy"))
    for i, u in enumerate(c.legacy.units):
        if u.name in ours_units:
            out.append((("legacy", "units", i, "name"), f"{u.name} is a unit clusterbook runs itself"))
        for j, n in enumerate(u.nodes):
            if n not in nodes:
                out.append((("legacy", "units", i, "nodes", j), f"unknown node '{n}'"))
    if c.legacy.slurm_jobs and not any(t.slurm for t in c.tiers):
        out.append((("legacy", "slurm_jobs"), "jobs are cancelled in the SLURM tiers' partitions only, and no tier "
                                              "runs under SLURM"))
    if c.legacy.slurm_jobs and not c.legacy.slurm_user:
        out.append((("legacy", "slurm_jobs"), "give legacy.slurm_user, the user whose jobs these are (seed 004: "
                                              "root): jobs are cancelled by name and owner, never by a name another "
                                              "user's job can have"))
    for i, job in enumerate(c.legacy.slurm_jobs):
        if job in {f"llama-{t.name}" for t in c.tiers}:
            out.append((("legacy", "slurm_jobs", i), f"{job} is a job clusterbook submits itself"))
    return out
