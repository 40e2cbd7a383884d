"""Generations: what one deploy replaced on a node (files, the engine link), the shell that records it there, and
which generations a rollback restores. Pure: commands are text, and a node's listing is parsed here."""

from __future__ import annotations

import contextlib
import json
import posixpath
import shlex
from dataclasses import dataclass

KEPT = 30  # generations kept per node; older ones are pruned when a deploy ends
STATES = ("applied", "verified", "rolled-back")


@dataclass(frozen=True)
class Generation:
    """One deploy on one node: the files it replaced (kept) or created, and the engine link before and after."""

    id: str
    phase: str  # what changed: a tier's name, or engine, router, gateway, monitoring, slurm
    runbook: str
    cluster_sha: str
    time: str
    state: str  # applied (deployed, not verified yet) | verified (scenarios passed) | rolled-back
    files: tuple[str, ...] = ()
    created: tuple[str, ...] = ()
    engine_before: str = ""
    engine_after: str = ""

    @property
    def engine_moved(self) -> bool:
        return bool(self.engine_after) and self.engine_after != self.engine_before


def phase_of(runbook: str, tier: str | None) -> str:
    """What a runbook run changes, as apply and rollback name it: the tier, else the runbook (install: engine)."""
    return tier or {"install": "engine"}.get(runbook, runbook)


# What a generation folder is called (generation_id): the prune removes only entries of this shape, so whatever else
# lies in generations_dir is never touched.
GENERATION_NAME = "^[0-9]{8}T[0-9]{6}[.][0-9]{6}Z-[a-z0-9-]+$"


def generation_id(stamp: str, runbook: str, tier: str | None) -> str:
    """Ids sort by time: a UTC stamp with microseconds, then what ran."""
    return f"{stamp}-{runbook}" + (f"-{tier}" if tier else "")


def _dir(gdir: str, gid: str) -> str:
    return shlex.quote(posixpath.join(gdir, gid))


def begin_command(gdir: str, gid: str, meta: dict, install_dir: str) -> str:
    """Start a generation on a node: its meta, state applied, and where the engine link points now."""
    d = _dir(gdir, gid)
    return (f"mkdir -p {d}/files && printf '%s\\n' {shlex.quote(json.dumps(meta, sort_keys=True))} > {d}/meta.json"
            f" && echo applied > {d}/state && {{ readlink {shlex.quote(install_dir)} > {d}/engine_before || true; }}")


def save_command(gdir: str, gid: str, path: str) -> str:
    """Before a file is replaced: keep its content (mode and owner too), or note that it is new. Once per file."""
    d = _dir(gdir, gid)
    p = shlex.quote(path)
    kept = _dir(gdir, gid) + "/files" + shlex.quote(path)
    return (f"if [ -e {kept} ] || grep -qxF {p} {d}/created 2>/dev/null; then :; "
            f"elif [ -e {p} ] || [ -L {p} ]; then mkdir -p \"$(dirname {kept})\" && cp -a {p} {kept}; "
            f"else echo {p} >> {d}/created; fi")


def end_command(gdir: str, gid: str, install_dir: str, kept: int = KEPT) -> str:
    """End a generation: drop it when it changed nothing, else note the engine link now; keep the newest `kept`."""
    d = _dir(gdir, gid)
    g = shlex.quote(gdir)
    return (f"now=$(readlink {shlex.quote(install_dir)} || true); "
            f"if [ -z \"$(find {d}/files -mindepth 1 -print -quit)\" ] && [ ! -s {d}/created ] "
            f"&& [ \"$now\" = \"$(cat {d}/engine_before)\" ]; then rm -rf {d}; "
            f"else echo \"$now\" > {d}/engine_after; fi; "
            f"ls -1 {g} | grep -E '{GENERATION_NAME}' | sort | head -n -{kept} "
            f"| while read -r old; do rm -rf {g}/\"$old\"; done")


def listing_command(gdir: str) -> str:
    """Print every generation of a node in the form parse_listing reads."""
    g = shlex.quote(gdir)
    return (f"[ -d {g} ] || exit 0; cd {g} && for d in $(ls -1 | sort); do "
            "echo \"== $d\"; echo \"meta $(cat \"$d/meta.json\" 2>/dev/null)\"; "
            "echo \"state $(cat \"$d/state\" 2>/dev/null)\"; "
            "echo \"engine_before $(cat \"$d/engine_before\" 2>/dev/null)\"; "
            "echo \"engine_after $(cat \"$d/engine_after\" 2>/dev/null)\"; "
            "(cd \"$d/files\" 2>/dev/null && find . -type f -o -type l) | sed 's|^\\.|file |'; "
            "sed 's/^/created /' \"$d/created\" 2>/dev/null; done; true")


def parse_listing(text: str) -> list[Generation]:
    """The generations a node listed, oldest first; a generation without its meta (a deploy cut off) is skipped."""
    found: list[dict] = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "==":
            found.append({"id": value.strip(), "files": [], "created": []})
        elif found and key == "meta":
            with contextlib.suppress(json.JSONDecodeError):
                found[-1]["meta"] = json.loads(value)
        elif found and key in ("state", "engine_before", "engine_after"):
            found[-1][key] = value.strip()
        elif found and key in ("file", "created") and value.strip():
            found[-1]["files" if key == "file" else "created"].append(value.strip())
    gens = []
    for g in found:
        meta = g.get("meta")
        if not isinstance(meta, dict):
            continue
        gens.append(Generation(g["id"], str(meta.get("phase", "")), str(meta.get("runbook", "")),
                               str(meta.get("cluster_sha", "")), str(meta.get("time", "")),
                               g.get("state") if g.get("state") in STATES else "applied",
                               tuple(g["files"]), tuple(g["created"]), g.get("engine_before", ""),
                               g.get("engine_after", "")))
    return sorted(gens, key=lambda g: g.id)


def concerns(g: Generation, phase: str) -> bool:
    """A generation counts for a phase when it changed that phase, or the engine every tier runs."""
    return g.phase == phase or g.phase == "engine"


def to_restore(gens: list[Generation], phase: str) -> list[Generation]:
    """What a rollback of `phase` undoes on one node, newest first: every applied generation since the newest
    verified one; with none verified, only the newest applied one (never the first deploy of a node)."""
    mine = [g for g in gens if concerns(g, phase)]
    verified = [i for i, g in enumerate(mine) if g.state == "verified"]
    since = mine[verified[-1] + 1:] if verified else mine[-1:]
    return [g for g in reversed(since) if g.state == "applied"]


def restore_command(gdir: str, g: Generation, install_dir: str) -> str:
    """Put back what one generation replaced, remove what it created, move the engine link back; mark it."""
    d = _dir(gdir, g.id)
    parts = []
    for path in g.files:
        p = shlex.quote(path)
        parts.append(f"cp -a {d}/files{p} {p}.clusterbook && mv -fT {p}.clusterbook {p}")
    for path in g.created:
        parts.append(f"rm -f {shlex.quote(path)}")
    if g.engine_moved and g.engine_before:
        link = shlex.quote(install_dir.rstrip("/"))
        name = shlex.quote(posixpath.basename(install_dir.rstrip("/")))
        parts.append(f"cd {shlex.quote(posixpath.dirname(install_dir.rstrip('/')))} && "
                     f"ln -sfn {shlex.quote(g.engine_before)} {name}.new && mv -T {name}.new {name} && "
                     f"test -x {link}/")
    parts.append(f"echo rolled-back > {d}/state")
    return " && ".join(parts)


def after_restore(paths: list[str]) -> list[str]:
    """What restored files need before the services restart: systemd reads its units again, nft its rules."""
    commands = []
    if any(p.startswith("/etc/systemd/") for p in paths):
        commands.append("systemctl daemon-reload")
    commands += [f"if [ -e {shlex.quote(p)} ]; then nft -f {shlex.quote(p)}; fi" for p in paths if p.endswith(".nft")]
    return commands


def mark_command(gdir: str, ids: list[str], state: str) -> str:
    """Set the state of these generations (verified after the scenarios passed)."""
    assert state in STATES
    return " && ".join(f"echo {state} > {_dir(gdir, i)}/state" for i in ids) or "true"


@dataclass(frozen=True)
class Recording:
    """What the executor needs to record one run as a generation on each node it touches."""

    gdir: str
    gid: str
    install_dir: str
    meta: dict

    def begin(self) -> str:
        return begin_command(self.gdir, self.gid, self.meta, self.install_dir)

    def save(self, path: str) -> str:
        return save_command(self.gdir, self.gid, path)

    def end(self) -> str:
        return end_command(self.gdir, self.gid, self.install_dir)
