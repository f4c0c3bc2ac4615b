"""A warm restart: the registry as the store kept it, before the node serves.

Overrides come back first, so restored instances show them at once. Instances come back as
registrations with a full fresh lease: the ones still running renew as before, and the ones
that died while the node was down expire a lease duration later, as any silent instance does.
The registry index goes on from where it was, so Eureka clients' delta versions never go back;
changes made before the restart are forgotten by the journal (the epoch is new), so a client
long-polling or watching from an old index is told to re-fetch in full.
"""

from __future__ import annotations

import structlog

from registry.core import Registry
from registry.journal import DeltaJournal
from registry.store.sqlite import Snapshot

log = structlog.get_logger()


def restore(registry: Registry, journal: DeltaJournal, snapshot: Snapshot, *, now_ms: int) -> int:
    """Load `snapshot` into an empty registry; returns how many instances came back."""
    registry.restore({o.instance_id: o.status for o in snapshot.overrides}, snapshot.index)
    journal.forget_through(registry.index)
    for stored in snapshot.instances:
        registry.register(stored.instance, now_ms=now_ms, is_replication=True)
    log.info(
        "store_restored",
        instances=len(snapshot.instances),
        overrides=len(snapshot.overrides),
        index=snapshot.index,
    )
    return len(snapshot.instances)
