"""Write rendered artifacts as one tree per node that mirrors the target paths (build/<node>/etc/...)."""

from __future__ import annotations

import os
from pathlib import Path

from clusterbook.model.problems import Refused
from clusterbook.pure.render.artifacts import Artifact


class OutsideFolder(Refused):
    """A file would land outside the folder it belongs in."""


def inside(root: Path, *parts: str) -> Path:
    """root/parts, resolved; refused when it would land outside root (.., absolute parts, symlinks)."""
    base = root.resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and not path.is_relative_to(base):
        raise OutsideFolder(f"{'/'.join(parts)} would be written outside {root}")
    return path


def no_links_inside(root: Path) -> None:
    """Refuse a folder about to be written by a tool that follows links (MkDocs): any symbolic link inside it could
    send a file outside it."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                raise OutsideFolder(f"{path} is a symbolic link (to {os.readlink(path)}): files written through it "
                                    f"would land outside {root}; remove it first")


def artifact_path(out_dir: Path, artifact: Artifact) -> Path:
    return inside(out_dir, artifact.node, artifact.path.lstrip("/"))


def write_tree(artifacts: list[Artifact], out_dir: Path) -> list[Path]:
    """Write every artifact (only when its bytes differ, so mtimes mean something); returns the paths."""
    written = []
    for artifact in artifacts:
        path = artifact_path(out_dir, artifact)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = artifact.text.encode()
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        os.chmod(path, artifact.mode)
        written.append(path)
    return written
