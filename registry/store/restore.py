"""A warm restart: the registry as the store kept it, before the node serves.

Overrides, override removals, tombstones and admins' checks come back first, so restored
instances show their overrides (and get their checks) at once. Instances come back in bulk
(`Registry.load`) as registrations that keep their last renewal written (old evidence, which
never outweighs a peer's removal made after it) with a lease duration of grace: the ones still
running renew as before, and the ones that died while the node was down expire at the end of
the grace, as any silent instance does, or sooner, when a peer's removal of them arrives
(peers/anti_entropy.py). The registry index goes on from where it was, so Eureka clients' delta
versions never go back; every index up to the restored state is forgotten by the journal (and
the epoch is new), so a client long-polling or watching from an index of the last run is told
to re-fetch in full. (An index of the last run beyond the restored one, from changes it never
wrote, is caught only by the epoch, which clients should send.)
"""

from __future__ import annotations

from collections.abc import Iterable, Set

import structlog

from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.reads.journal import DeltaJournal
from registry.store.sqlite import Snapshot, StoredOverride

log = structlog.get_logger()


def restore(registry: Registry, journal: DeltaJournal, snapshot: Snapshot, *, now_ms: int) -> int:
    """Load `snapshot` into an empty registry; returns how many instances came back."""
    registry.restore(
        {o.instance_id: o.status for o in snapshot.overrides},
        snapshot.index,
        notes_of(snapshot.overrides),
        tombstones=snapshot.tombstones,
        override_removals=snapshot.override_removals,
        app_checks=snapshot.app_checks,
        app_check_removals=snapshot.app_check_removals,
    )
    # At the time the store read them as registered: most need not be made again.
    now_ms = snapshot.registered_ms or now_ms
    registry.load(
        snapshot.instances,
        now_ms=now_ms,
        renewals=snapshot.renewals,
        renewing=snapshot.renewing,
    )
    for iid, held in snapshot.check_holds.items():  # as stored with the instance's DOWN
        registry.checks.take(iid, held)
    # Changes the last run made after its last write are lost, so its indexes cannot be
    # trusted: refuse them all (the restored instances are in any full fetch).
    journal.forget_through(registry.index)
    log.info(
        "store_restored",
        instances=len(snapshot.instances),
        overrides=len(snapshot.overrides),
        tombstones=len(snapshot.tombstones),
        index=snapshot.index,
    )
    return len(snapshot.instances)


def restore_missing(
    registry: Registry,
    snapshot: Snapshot,
    removed: Set[tuple[str, str]],
    overrides_removed: Set[str],
    *,
    now_ms: int,
) -> int:
    """A store that could not be opened at start-up has opened: bring back what it kept and
    this run has neither (a client may have registered again meanwhile, and is newer) nor
    removed (a cancel or an override deleted meanwhile stays done). Returns how many instances
    came back."""
    present = registry.overrides
    missing = [
        o
        for o in snapshot.overrides
        if o.instance_id not in present and o.instance_id not in overrides_removed
    ]
    # The same override, handed over meanwhile by a peer without its note: the stored note
    # (reason, expiry, author) is taken back rather than lost.
    registry.overrides.take_notes(
        notes_of(o for o in snapshot.overrides if present.get(o.instance_id) is o.status)
    )
    registry.restore({o.instance_id: o.status for o in missing}, 0, notes_of(missing))
    for tombstone in snapshot.tombstones:
        registry.tombstones.put(tombstone)
    for check in snapshot.app_checks:  # those decided later meanwhile win (core/app_checks.py)
        registry.set_app_check(check, now_ms=now_ms, is_replication=True)
    for app, at_ms in snapshot.app_check_removals:
        registry.remove_app_check(app, at_ms=at_ms, now_ms=now_ms, is_replication=True)
    count = 0
    for instance in snapshot.instances:
        key = (instance.app, instance.instance_id)
        if (
            key in removed
            or registry.tombstones.get(*key) is not None
            or any(
                lease.instance.instance_id == instance.instance_id
                for lease in registry.application(instance.app)
            )
        ):
            continue
        registry.register(instance, now_ms=now_ms, is_replication=True)
        count += 1
    log.info("store_restored_late", instances=count, overrides=len(missing))
    return count


def notes_of(overrides: Iterable[StoredOverride]) -> list[tuple[str, Note]]:
    return [
        (o.instance_id, Note(o.app, o.status, o.reason, o.set_ms, o.expires_ms, o.set_by))
        for o in overrides
    ]
