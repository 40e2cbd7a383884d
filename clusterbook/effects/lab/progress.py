"""Progress for long lab steps: a status line with elapsed time (and the tool's own progress), then a result line."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clusterbook.effects.console import console

NINJA_LINE = re.compile(r"^\[(\d+)/(\d+)\]")
BOOTSTRAP_LINE = re.compile(r"^I: (\w.*?)[.\s]*$")


def ninja_progress(line: str) -> str | None:
    """'[12/340] Building CXX …' -> '12/340 targets'."""
    m = NINJA_LINE.match(line)
    return f"{m.group(1)}/{m.group(2)} targets" if m else None


def bootstrap_progress(line: str) -> str | None:
    """mmdebstrap's (and debootstrap's) 'I: downloading packages with apt...' -> 'downloading packages with apt'."""
    m = BOOTSTRAP_LINE.match(line)
    return m.group(1)[0].lower() + m.group(1)[1:] if m else None


def _elapsed(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


@contextmanager
def step(title: str) -> Iterator[Callable[[str], None]]:
    """Show `title …` with elapsed time, refreshed every second while the block runs; the block may report
    the tool's own progress through the callable it receives."""
    started = time.monotonic()
    detail = [""]
    done = threading.Event()
    with console.status(f"{title} …") as status:
        def refresh() -> None:
            while not done.wait(1):
                shown = f" {detail[0]}," if detail[0] else ""
                status.update(f"{title} …{shown} {_elapsed(time.monotonic() - started)}")
        ticker = threading.Thread(target=refresh, daemon=True)
        ticker.start()
        try:
            yield lambda text: detail.__setitem__(0, text)
        except BaseException:
            console.print(f"[red]✗[/] {title} ({_elapsed(time.monotonic() - started)})")
            raise
        finally:
            done.set()
            ticker.join()
    console.print(f"[green]✓[/] {title} ({_elapsed(time.monotonic() - started)})")


def run_reporting(argv: list[str], report: Callable[[str], None],
                  progress: Callable[[str], str | None] = lambda line: None, new_session: bool = False) -> None:
    """Run argv (in a session of its own if asked), passing each progress figure its output shows to report; on
    failure raise RuntimeError with the last lines of the output; interrupted, stop it."""
    tail: deque[str] = deque(maxlen=25)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace", start_new_session=new_session)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            figure = progress(line)
            if figure:
                report(figure)
    except BaseException:  # ^C: a tool in a session of its own gets no signal from the terminal
        proc.kill()
        proc.wait()
        raise
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} … failed with exit status {proc.returncode}:\n" + "\n".join(tail))
