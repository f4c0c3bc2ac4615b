"""Per-application digests, for anti-entropy: two nodes with equal digests for an application
hold the same instances with the same statuses, overrides and lastDirtyTimestamps, and
remember the same removals (by instance id and the lastDirtyTimestamp removed: when each
node evicted is its own affair).

Lease times are left out (each node renews on its own clock). The digest is a stable hash
(BLAKE2b over a canonical text), never Python's `hash`, which differs between processes. Each
application's digest is kept until one of its instances or removals changes, so a peer asking
every anti-entropy round costs what changed since the last round, not the whole registry (at
100 000 instances a full recount held the loop for a quarter of a second), and a recount of
many applications gives the loop a turn between slices.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from registry.common.tasks import Pacer
from registry.core.model import ChangeEvent, LeaseRecord
from registry.core.registry import Registry
from registry.core.subscriber import Loaded, Subscriber
from registry.core.tombstones import Tombstone


class Digests(Subscriber):
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._digests: dict[str, str] = {}
        self._stale: set[str] = set()
        self._all_stale = True

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: the instance's application is to be digested again."""
        self._stale.add(event.lease.instance.app)

    def on_load(self, _registry: Loaded) -> None:
        self._all_stale = True

    async def current(self, pacer: Pacer | None = None) -> dict[str, str]:
        """Application name -> digest of its instances and removals, for the registry as it
        is now; applications with neither are left out."""
        registry = self._registry
        stale = self._stale | registry.tombstones.touched()
        self._stale = set()
        if self._all_stale:
            self._all_stale = False
            self._digests = {}
            stale |= set(registry.application_names()) | set(
                registry.tombstones.application_names()
            )
        for app in stale:
            leases = registry.application(app)
            removed = registry.tombstones.of(app)
            if leases or removed:
                self._digests[app] = digest(leases, removed)
            else:
                self._digests.pop(app, None)
            if pacer is not None:
                await pacer.pace()
        return self._digests


def digest(leases: Iterable[LeaseRecord], removed: Iterable[Tombstone] = ()) -> str:
    rows = sorted(
        [
            f"{i.instance_id}\0{i.status.value}\0{i.overridden_status.value}\0{i.last_dirty_ms}"
            for i in (lease.instance for lease in leases)
        ]
        + [f"{t.instance_id}\0removed\0\0{t.dirty_ms}" for t in removed]
    )
    return hashlib.blake2b("\n".join(rows).encode(), digest_size=12).hexdigest()
