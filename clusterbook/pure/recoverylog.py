"""The phases of a tier's recovery, read from its nodes' journal lines (`journalctl -o short-unix`): when the worker
was back, when the head aborted, was started again, began and finished loading its model; and from a head's own
log (a SLURM step's file), how long its last load took."""

from __future__ import annotations

import re

JOURNAL_LINE = re.compile(r"^(\d+(?:\.\d+)?) \S+ [^:]+: (.*)$")

# phase: (whose journal, what its line says, the phase it must follow)
MARKERS: dict[str, tuple[str, re.Pattern, str | None]] = {
    "worker back": ("worker", re.compile(r"^Started "), None),
    "head aborted": ("head", re.compile(r"Remote RPC server crashed|Main process exited"), None),
    "head started": ("head", re.compile(r"^Started "), None),
    "loading": ("head", re.compile(r"load_model: loading model"), "head started"),
    "model loaded": ("head", re.compile(r"(llama_server|main): model loaded"), "loading"),
}


def journal_times(text: str) -> list[tuple[float, str]]:
    """(unix time, message) of every line in journalctl's short-unix output; other lines are skipped."""
    lines = []
    for line in text.splitlines():
        match = JOURNAL_LINE.match(line)
        if match:
            lines.append((float(match.group(1)), match.group(2)))
    return lines


def journal_phases(journals: dict[str, str], t0: float) -> dict[str, float]:
    """Seconds after t0 of the first line of each phase (after the phase it follows), from the head's and a worker's
    journal; a phase with no line is left out."""
    lines = {who: journal_times(text) for who, text in journals.items()}
    phases: dict[str, float] = {}
    for phase, (who, pattern, after) in MARKERS.items():
        if after and after not in phases:
            continue
        floor = t0 + phases[after] if after else t0
        for when, message in lines.get(who, []):
            if when >= floor and pattern.search(message):
                phases[phase] = round(when - t0, 3)
                break
    return phases


def ordered(phases: dict[str, float]) -> list[tuple[str, float]]:
    """The phases in the order they happened."""
    return sorted(phases.items(), key=lambda item: item[1])


# llama.cpp's log timestamps: minutes.seconds.milliseconds.microseconds since the process started
LOG_TIME = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")


def _log_seconds(line: str) -> float | None:
    match = LOG_TIME.match(line)
    if not match:
        return None
    minutes, seconds, millis, micros = (int(g) for g in match.groups())
    return minutes * 60 + seconds + millis / 1e3 + micros / 1e6


def last_load_s(head_log: str) -> float | None:
    """Seconds from the last "loading model" line of a head's log to the "model loaded" line after it (the clock
    is the process's own, so the file may hold several processes, one after another)."""
    lines = head_log.splitlines()
    starts = [i for i, line in enumerate(lines) if MARKERS["loading"][1].search(line)]
    if not starts:
        return None
    begun = _log_seconds(lines[starts[-1]])
    for line in lines[starts[-1] + 1:]:
        if MARKERS["model loaded"][1].search(line):
            ended = _log_seconds(line)
            return round(ended - begun, 3) if begun is not None and ended is not None else None
    return None
