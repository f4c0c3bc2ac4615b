"""Taking what a peer holds: its removals, then its copies (start-up sync and anti-entropy).

The peer's removals come first: each removes our copy unless the copy wins over it, and is
remembered (registry/core/tombstones.py, where the rule is). Then a peer's copy is adopted when its
lease is still alive there and ours is missing (unless a removal we remember wins over it),
or when it is newer by lastDirtyTimestamp. At the same lastDirtyTimestamp a copy is not taken
for its override: overrides are decided apart, by when the admins set or removed them
(`Registry.merge_overrides`), so a copy that merely changed later (a re-registration on a node
that was cut off) never undoes an admin's decision. Without overrides on either side, a copy
that differs in status and changed later is taken (the status an admin's removal left).
Adopted leases keep the peer's last renewal, so an instance that died there never gets a new
life here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from registry.codec import instance_from_wire, wire
from registry.codec.checks import app_checks_from_document, holds_from_document
from registry.codec.notes import notes_from_document, removals_from_document
from registry.core.checks import held_by_server
from registry.core.model import InstanceInfo, InstanceStatus, Lease
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from registry.errors import BadInput, UnknownInstance

log = structlog.get_logger()

_CHUNK = 500  # instances adopted between two turns of the event loop
_UNKNOWN = InstanceStatus.UNKNOWN


def applications(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The application objects of a `GET apps` document (or of a `GET apps/{app}` one)."""
    if "application" in document and isinstance(document["application"], Mapping):
        return [document["application"]]  # a single application
    apps = document.get("applications")  # absent: None, which lists nothing
    return as_list(apps.get("application")) if isinstance(apps, Mapping) else []


def removals(document: Mapping[str, Any]) -> list[Tombstone]:
    """The removals of a `GET peerreplication/removed` answer; an entry that does not read is
    left out."""
    found = []
    for entry in as_list(document.get("removed")):
        try:
            app, iid = wire.text(entry, "appName"), wire.text(entry, "id")
            dirty_ms = wire.timestamp(entry.get("lastDirtyTimestamp"), "lastDirtyTimestamp")
            at_ms = wire.timestamp(entry.get("removedAt"), "removedAt")
        except BadInput as exc:
            log.warning("peer_removal_unreadable", detail=str(exc))
            continue
        if app and iid and dirty_ms is not None and at_ms is not None:
            # A release before said nothing: taken as evidence (a cancel so taken only waits
            # for the lease to run out here).
            expired = entry.get("expired") is not False
            found.append(Tombstone(app.upper(), iid, dirty_ms, at_ms, expired))
    return found


async def merge(
    registry: Registry,
    apps: list[Mapping[str, Any]],
    *,
    now_ms: int,
    removed: Iterable[Tombstone] = (),
) -> int:
    """Take the peer's removals (`removed`), then adopt what its applications hold newer than
    ours; returns how many instances changed here. Yields to the loop every few hundred
    instances, so a large copy never stalls the node.
    """
    adopted = seen = 0
    for removal in removed:
        seen += 1
        if seen % _CHUNK == 0:
            await asyncio.sleep(0)
        adopted += registry.bury(removal, now_ms=now_ms)
    for app in apps:
        for doc in as_list(app.get("instance")):
            seen += 1
            if seen % _CHUNK == 0:
                await asyncio.sleep(0)
            try:
                instance = instance_from_wire(doc, now_ms=now_ms)
                renewed = renewed_at(doc, now_ms=now_ms)
                registered = wire.timestamp(
                    (doc.get("leaseInfo") or {}).get("registrationTimestamp"),
                    "leaseInfo.registrationTimestamp",
                )
            except BadInput as exc:
                log.warning("peer_instance_unreadable", detail=str(exc))
                continue
            if renewed + instance.duration_secs * 1000 < now_ms and not held_by_server(instance):
                continue  # its lease has run out there too (a lease the registry holds never)
            if _wanted(_ours(registry, instance, now_ms), instance):
                # Renewed there since it registered: self-preservation expects it to renew.
                renewing = registered is not None and renewed > registered
                adopted += registry.adopt(
                    instance, now_ms=now_ms, last_renewal_ms=renewed, renewing=renewing
                )
    return adopted


def renewed_at(doc: Mapping[str, Any], *, now_ms: int) -> int:
    """When a peer's copy of an instance was last renewed there (its
    `leaseInfo.lastRenewalTimestamp`), or now when it does not say. Adopted, the copy keeps
    that time: dated at its arrival, a copy that crossed a partition would outlive a cancel
    made after its last renewal (registry/core/tombstones.py)."""
    lease_info = doc.get("leaseInfo") or {}
    renewed = wire.timestamp(
        lease_info.get("lastRenewalTimestamp"), "leaseInfo.lastRenewalTimestamp"
    )
    return renewed or now_ms


def take_overrides(registry: Registry, digest: Mapping[str, Any], *, now_ms: int) -> int:
    """The overrides and override removals a peer's digest answer lists, where later than
    ours (`Registry.merge_overrides`); how many changed here."""
    changed = registry.merge_overrides(
        notes_from_document(digest.get("overrideNotes")),
        removals_from_document(digest.get("overridesRemoved")),
        now_ms=now_ms,
    )
    if changed:
        log.info("peer_overrides_taken", overrides=changed)
    return changed


def take_app_checks(registry: Registry, digest: Mapping[str, Any], *, now_ms: int) -> int:
    """The admins' checks and check removals a peer's digest answer lists, where later than
    ours (registry/core/app_checks.py); how many changed here."""
    checks, removals = app_checks_from_document(digest.get("appChecks"))
    changed = sum(
        registry.set_app_check(check, now_ms=now_ms, is_replication=True) for check in checks
    )
    changed += sum(
        registry.remove_app_check(app, at_ms=at_ms, now_ms=now_ms, is_replication=True)
        for app, at_ms in removals
    )
    if changed:
        log.info("peer_app_checks_taken", app_checks=changed)
    return changed


def _wanted(ours: Lease | None, theirs: InstanceInfo) -> bool:
    if ours is None:
        return True  # unless a removal wins over it: `Registry.adopt` asks
    mine = ours.instance
    if theirs.last_dirty_ms != mine.last_dirty_ms:
        return theirs.last_dirty_ms > mine.last_dirty_ms
    return (
        theirs.overridden_status is _UNKNOWN
        and mine.overridden_status is _UNKNOWN
        and theirs.status is not mine.status
        and theirs.last_updated_ms > mine.last_updated_ms
    )


def _ours(registry: Registry, instance: InstanceInfo, now_ms: int) -> Lease | None:
    try:
        return registry.get(instance.app, instance.instance_id, now_ms=now_ms)
    except UnknownInstance:
        return None


def as_list(value: object) -> list[Any]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Mapping)]
    return [value] if isinstance(value, Mapping) else []


def take_check_holds(registry: Registry, digest: Mapping[str, Any]) -> int:
    """The checks' holds a peer's digest lists that this node lacks, on instances it shows
    DOWN as the peer does: a copy taken at start-up (or one whose hold was lost) is held
    here too, so the check's recovery releases it wherever it runs. How many were taken."""
    lacking = {
        iid: held
        for iid, held in holds_from_document(digest.get("checkHolds")).items()
        if iid not in registry.checks
    }
    if not lacking:  # the usual round: nothing to look up
        return 0
    # Found by id in one pass (the digest names no application), not one search each.
    down = {
        lease.instance.instance_id: lease
        for lease in registry.leases()
        if lease.instance.status is InstanceStatus.DOWN and registry.asks_check(lease.instance)
    }
    taken = 0
    for iid, held in lacking.items():
        lease = down.get(iid)
        if lease is not None:
            registry.take_hold(lease, held)
            taken += 1
    return taken


def take_check_releases(registry: Registry, digest: Mapping[str, Any], *, now_ms: int) -> int:
    """Holds released on the node that checks the instance (its digest's `checkVerdicts`
    says so) and still held here: a release this node missed (a queue that overflowed in a
    partition) would otherwise keep the instance DOWN here for good. Released here alone:
    every node asks its peers. How many."""
    verdicts = digest.get("checkVerdicts")
    if not isinstance(verdicts, Mapping):
        return 0
    released = 0
    for iid, verdict in verdicts.items():
        if not isinstance(verdict, Mapping) or verdict.get("held") is not False:
            continue
        app = verdict.get("app")
        if not isinstance(iid, str) or not isinstance(app, str) or iid not in registry.checks:
            continue
        try:
            released += registry.check_passed(app, iid, now_ms=now_ms, replicate=False)
        except UnknownInstance:
            continue
    return released
