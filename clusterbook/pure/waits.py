"""Waits that fail early: a readiness check that also watches the systemd unit, so a service that keeps exiting
fails the wait at once with the end of its journal instead of waiting out the time (one text for every runbook)."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

EXITED = "exited:"  # what the wait prints when the unit keeps exiting: the executor stops retrying on it
_RESTARTING = '[ "$state" = auto-restart ] || [ "$state" = failed ]'


def _state(unit: str) -> str:
    return f"state=$(systemctl show -p SubState --value {unit})"


def _exited(unit: str) -> str:
    """The program's own last lines, then systemd's last word on the unit (its lines about killing the unit's
    control group once filled the tail and hid the program's error)."""
    service = unit if "." in unit else f"{unit}.service"
    return (f'echo "{EXITED} {unit} is $state; its journal ends:"; '
            f"journalctl _SYSTEMD_UNIT={service} -n 6 --no-pager -o cat; journalctl -u {unit} -n 1 --no-pager -o cat")


def http_or_exited(url: str, status: int, unit: str, restart_sec: int) -> str:
    """Prints `healthy` once `url` answers `status`; `exited: …` and the journal when the unit is restarting or
    failed and still is one restart later; else `waiting: …`."""
    curl = f"code=$(curl -s -o /dev/null -m 5 -w '%{{http_code}}' {shlex.quote(url)})"
    return (f"{curl}; {_state(unit)}; "
            f'if [ "$code" != {status} ] && {{ {_RESTARTING}; }}; then sleep {restart_sec + 1}; '
            f'{curl}; {_state(unit)}; fi; '
            f'if [ "$code" = {status} ]; then echo healthy; elif {_RESTARTING}; then {_exited(unit)}; '
            f'else echo "waiting: {urlsplit(url).path or "/"} $code, {unit} $state"; fi')


def port_or_exited(port: int | str, unit: str, restart_sec: int) -> str:
    """Prints `listening` once a TCP port listens on the host; `exited: …` and the journal when the unit keeps
    exiting; else `waiting: …`."""
    listens = f"ss -Hltn 'sport = :{port}' | grep -q LISTEN"
    return (f"if {listens}; then echo listening; else {_state(unit)}; "
            f"if {_RESTARTING}; then sleep {restart_sec + 1}; {_state(unit)}; {listens} && state=listening; fi; "
            f'if [ "$state" = listening ]; then echo listening; elif {_RESTARTING}; then {_exited(unit)}; '
            f'else echo "waiting: {unit} $state"; fi; fi')
