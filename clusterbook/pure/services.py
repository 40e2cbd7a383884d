"""systemd units brought to a state: the one place the runbooks' systemctl commands and checks are written. Pure."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceCommand:
    """One command of a service action: what runs, what makes it unnecessary, what it reports."""

    command: str
    unless: str | None
    changed_when: str = "always"
    label: str | None = None


def loaded_as_on_disk(*units: str) -> str:
    """A check that systemd has every unit as its file on disk says (asking loads a unit not loaded yet), so a
    `systemctl daemon-reload` (0.2 s on a node, three on a deploy's path) runs only where a unit file changed."""
    return f"! systemctl show -p NeedDaemonReload --value {' '.join(shlex.quote(u) for u in units)} | grep -qx yes"


def _all(check: str, units: list[str]) -> str:
    return " && ".join(check.format(u=u) for u in units)


def _restart(units: list[str], state: str, check: str | None) -> str:
    """The command that restarts or reloads units; try-restarted and reloaded leave a stopped or absent unit alone
    (a bare `systemctl try-restart` fails on a unit that does not exist yet)."""
    first = f"{check} && " if check else ""
    if state == "restarted":
        return f"{first}systemctl restart {' '.join(units)}"
    if state == "try-restarted":
        clauses = [f"! systemctl cat {u} >/dev/null 2>&1 || {first}systemctl try-restart {u}" for u in units]
    else:
        clauses = [f"! systemctl is-active --quiet {u} || {{ {first}systemctl reload {u}; }}" for u in units]
    return clauses[0] if len(clauses) == 1 else " && ".join(f"{{ {c}; }}" for c in clauses)


def service_commands(units: list[str], state: str, enabled: bool | None = None, daemon_reload: bool = True,
                     also_units: list[str] = (), check: str | None = None) -> list[ServiceCommand]:
    """The commands that bring units to a state, each skipped where the state is already right."""
    if not units:
        raise ValueError("a service action names at least one unit")
    for unit in [*units, *also_units]:
        if unit != shlex.quote(unit) or unit.startswith("-"):
            raise ValueError(f"not a unit name: {unit!r}")
    names = " ".join(units)
    out = []
    if daemon_reload and state != "stopped":
        out.append(ServiceCommand("systemctl daemon-reload", loaded_as_on_disk(*units, *also_units), "never"))
    if state == "started":
        active = _all("systemctl is-active --quiet {u}", units)
        if enabled:
            out.append(ServiceCommand(f"{check + ' && ' if check else ''}systemctl enable --now {names}",
                                      _all("systemctl is-enabled --quiet {u}", units) + " && " + active))
        else:
            out.append(ServiceCommand(f"{check + ' && ' if check else ''}systemctl start {names}", active))
            if enabled is False:
                out.append(ServiceCommand(f"systemctl disable {names}", _all("! systemctl is-enabled --quiet {u} "
                                                                             "2>/dev/null", units)))
    elif state == "stopped":
        inactive = _all("! systemctl is-active --quiet {u}", units)
        if enabled is False:
            out.append(ServiceCommand(f"systemctl disable --now {names}",
                                      inactive + " && " + _all("! systemctl is-enabled --quiet {u} 2>/dev/null",
                                                               units)))
        else:
            out.append(ServiceCommand(f"systemctl stop {names}", inactive))
    else:
        out.append(ServiceCommand(_restart(units, state, check), None))
    return out


def handler_command(units: list[str], state: str, daemon_reload: bool, check: str | None) -> str:
    """A handler's one command: systemd reloaded first where asked, then the units restarted or reloaded."""
    if not units:
        return "systemctl daemon-reload"
    restart = _restart(units, state, check)
    if not daemon_reload:
        return restart
    return f"systemctl daemon-reload && {restart if state == 'restarted' else '{ ' + restart + '; }'}"
