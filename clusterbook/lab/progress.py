"""Progress for long lab steps: a spinner with elapsed time, and a line saying how long each step took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..console import console


@contextmanager
def step(title: str) -> Iterator[None]:
    started = time.monotonic()
    with console.status(f"{title} …"):
        try:
            yield
        except BaseException:
            console.print(f"[red]✗[/] {title} ({time.monotonic() - started:.0f} s)")
            raise
    console.print(f"[green]✓[/] {title} ({time.monotonic() - started:.0f} s)")
