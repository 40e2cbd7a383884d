"""The gateway holds a tier's requests while apply or rollback changes it: a mark on the gateway node, written before
the change and removed after it, that the wake service reads (its deadline ends a hold that nobody removed)."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterator
from contextlib import contextmanager

from rich.markup import escape

from clusterbook.effects.console import console
from clusterbook.model.schema import Cluster
from clusterbook.pure import layout


@contextmanager
def changing(c: Cluster, tier_name: str | None, transport) -> Iterator[None]:
    """While the block changes tier `tier_name`, requests to it wait at the gateway (at most the tier's timeout)
    instead of getting 503 once a crash's bound passed; nothing for a phase that is no tier behind the gateway."""
    tier = next((t for t in c.tiers if t.name == tier_name), None)
    if tier is None or not c.gateway or not any(r.tier == tier.name for r in c.gateway.routes):
        yield
        return
    mark = shlex.quote(layout.changing_mark(tier))
    folder = shlex.quote(posixpath.dirname(layout.changing_mark(tier)))
    made = transport.run(c.gateway.node, f"mkdir -p {folder} && echo $(( $(date +%s) + {tier.timeout_s} )) > {mark}")
    if not made.ok:  # the change goes on; its clients may see 503s as before
        console.print(f"[yellow]{c.gateway.node}: the gateway will not hold {tier.name}'s requests during the "
                      f"change ({made.returncode}: {escape(made.tail())})[/]")
    try:
        yield
    finally:
        transport.run(c.gateway.node, f"rm -f {mark}")
