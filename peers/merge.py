"""Taking instances from a peer's fetch documents: start-up sync and anti-entropy.

A peer's copy is adopted when ours is missing (and the peer's lease is still alive, and we did
not remove the instance after its last renewal there), when it is newer by lastDirtyTimestamp,
or, at the same lastDirtyTimestamp, when it differs in status or override and changed later
(an admin decision whose replication was lost). Adopted leases keep the peer's last renewal,
so an instance that died there never gets a new life here. Node clocks are assumed to agree
to well within a lease (NTP), as in every Eureka deployment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from registry.codec import instance_from_wire, wire
from registry.core import Registry
from registry.errors import BadInput, UnknownInstance
from registry.model import InstanceInfo, Lease

log = structlog.get_logger()

_CHUNK = 500  # instances adopted between two turns of the event loop


def applications(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The application objects of a `GET apps` document (or of a `GET apps/{app}` one)."""
    if "application" in document and isinstance(document["application"], Mapping):
        return [document["application"]]  # a single application
    apps = document.get("applications", {})
    found = apps.get("application", []) if isinstance(apps, Mapping) else []
    return _as_list(found)


async def merge(
    registry: Registry,
    apps: list[Mapping[str, Any]],
    *,
    now_ms: int,
    deleted: Mapping[str, Mapping[str, int]] | None = None,
) -> int:
    """Adopt what the peer's applications hold newer than ours; returns how many were adopted.

    `deleted`: app -> {instance id -> when removed here}. Yields to the loop every few hundred
    instances, so a large copy never stalls the node.
    """
    adopted = seen = 0
    for app in apps:
        removed = (deleted or {}).get(str(app.get("name", "")).upper(), {})
        for doc in _as_list(app.get("instance", [])):
            seen += 1
            if seen % _CHUNK == 0:
                await asyncio.sleep(0)
            try:
                instance = instance_from_wire(doc, now_ms=now_ms)
                lease_info = doc.get("leaseInfo") or {}
                renewed = wire.timestamp(
                    lease_info.get("lastRenewalTimestamp"), "leaseInfo.lastRenewalTimestamp"
                )
            except BadInput as exc:
                log.warning("peer_instance_unreadable", detail=str(exc))
                continue
            renewed = renewed or now_ms
            if renewed + instance.duration_secs * 1000 < now_ms:
                continue  # its lease has run out there too
            if _wanted(_ours(registry, instance, now_ms), instance, renewed, removed):
                adopted += registry.adopt(instance, now_ms=now_ms, last_renewal_ms=renewed)
    return adopted


def _wanted(
    ours: Lease | None, theirs: InstanceInfo, renewed_ms: int, removed: Mapping[str, int]
) -> bool:
    if ours is None:
        removed_ms = removed.get(theirs.instance_id)
        return removed_ms is None or removed_ms < renewed_ms
    mine = ours.instance
    if theirs.last_dirty_ms != mine.last_dirty_ms:
        return theirs.last_dirty_ms > mine.last_dirty_ms
    differs = (theirs.status, theirs.overridden_status) != (mine.status, mine.overridden_status)
    return differs and theirs.last_updated_ms > mine.last_updated_ms


def _ours(registry: Registry, instance: InstanceInfo, now_ms: int) -> Lease | None:
    try:
        return registry.get(instance.app, instance.instance_id, now_ms=now_ms)
    except UnknownInstance:
        return None


def _as_list(value: object) -> list[Any]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Mapping)]
    return [value] if isinstance(value, Mapping) else []
