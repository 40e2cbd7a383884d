"""An exclusive lock on one entry of the host's caches, so that both labs starting at once fill it once."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clusterbook.effects.lab.progress import step


@contextmanager
def cache_lock(entry: Path, what: str) -> Iterator[None]:
    """Hold the lock of a cache entry (a file beside it); when another process holds it, say so while waiting.
    The caller checks again under the lock whether the entry is there yet."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with entry.with_name(entry.name + ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with step(f"wait for the other lab to finish {what}"):
                fcntl.flock(lock, fcntl.LOCK_EX)
        yield
