"""Anti-entropy with a stock Eureka server, which has no digest or removals to give.

Its registry (`GET apps/`, as Eureka's own nodes read each other) is compared with ours
application by application, by what our digests compare (peers/digest.py): each instance's
id, status, override and lastDirtyTimestamp. What differs is merged as a copy from one of our
own peers is (peers/merge.py), without removals: a removal of ours still wins over its copy
(registry/core/tombstones.py). An instance only we hold reaches it when its client's heartbeat,
replicated, is answered 404 and we send the registration again.

An override of ours that the stock peer shows otherwise is replicated to it again: a stock
node forgets overrides when it restarts (it copies only instances that are UP), and an
admin's decision outlives that here. (An override deleted there whose deletion never reached
us comes back there too: the stock node keeps no time of the deletion to weigh.)

Its heartbeats reach us only once it lists this node among its peers (a migration's second
step). Until then its registry is our evidence that the leases we copied from it live: each
round renews ours by it (`renewed_there`), so a copy lives here as long as it does there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import structlog

from peers import merge
from peers.transport import PeerClient
from registry.common.clock import Clock
from registry.common.tasks import Pacer
from registry.core.model import LeaseRecord
from registry.core.registry import Registry

log = structlog.get_logger()


async def reconcile_with_stock(
    client: PeerClient,
    registry: Registry,
    clock: Clock,
    *,
    seen_before: Collection[str] | None = None,
) -> tuple[int, set[str]]:
    """One round with a stock peer, as `peers.anti_entropy.reconcile` is with ours: how many
    instances changed here, and the applications that differed (with `seen_before`, only
    those that differed in it too are merged)."""
    document = await client.fetch_registry()
    pacer = Pacer()
    changed = renewed = resent = 0
    differing = set()
    for app in merge.applications(document):
        name = app.get("name")
        if not isinstance(name, str):
            continue
        name = name.upper()
        await pacer.pace()
        renewed += _renew_from(registry, name, app, now_ms=clock.wall_ms())
        if their_digest(app) == our_digest(registry.application(name)):
            continue
        differing.add(name)
        if seen_before is not None and name not in seen_before:
            continue
        changed += await merge.merge(registry, [app], now_ms=clock.wall_ms())
        resent += _resend_overrides(registry, name, app, now_ms=clock.wall_ms())
    if renewed:
        log.debug("stock_leases_renewed", peer=client.url, leases=renewed)
    if resent:
        log.info("overrides_resent", peer=client.url, overrides=resent)
    return changed, differing


def renewed_there(doc: Mapping[str, Any]) -> int | None:
    """How long a stock server keeps an instance's lease, as a renewal time: its
    `lastRenewalTimestamp`. Eureka stores a renewal one duration ahead and keeps a lease a
    duration past that (contract 7), so taken as the renewal, the value keeps our copy exactly
    as long as the stock node keeps its own: never dropped here while it is live there."""
    lease = doc.get("leaseInfo")
    return _millis(lease.get("lastRenewalTimestamp")) if isinstance(lease, Mapping) else None


def _renew_from(registry: Registry, app: str, doc: Mapping[str, Any], *, now_ms: int) -> int:
    renewed = 0
    for instance in merge.as_list(doc.get("instance")):
        at_ms, iid = renewed_there(instance), instance.get("instanceId")
        if at_ms is not None and isinstance(iid, str):
            renewed += registry.renewed_elsewhere(app, iid, at_ms, now_ms=now_ms)
    return renewed


def _resend_overrides(registry: Registry, app: str, doc: Mapping[str, Any], *, now_ms: int) -> int:
    """Our overrides the stock peer shows otherwise, sent again: it lost them (a restart)."""
    resent = 0
    for instance in merge.as_list(doc.get("instance")):
        iid = instance.get("instanceId")
        ours = registry.overrides.get(iid) if isinstance(iid, str) else None
        if ours is not None and _overridden(instance) != ours.value:
            resent += registry.resend_override(app, str(iid), now_ms=now_ms)
    return resent


def _overridden(doc: Mapping[str, Any]) -> object:
    return doc.get("overriddenStatus", doc.get("overriddenstatus", "UNKNOWN"))


def their_digest(app: Mapping[str, Any]) -> str:
    """The digest of a stock application object's instances."""
    rows = []
    for doc in merge.as_list(app.get("instance")):
        overridden = _overridden(doc)
        rows.append(
            f"{doc.get('instanceId')}\0{doc.get('status')}\0{overridden}"
            f"\0{_number(doc.get('lastDirtyTimestamp'))}"
        )
    return _hashed(rows)


def our_digest(leases: Iterable[LeaseRecord]) -> str:
    """The same digest of our leases of one application."""
    return _hashed(
        f"{i.instance_id}\0{i.status.value}\0{i.overridden_status.value}\0{i.last_dirty_ms}"
        for i in (lease.instance for lease in leases)
    )


def _number(value: object) -> str:
    text = str(value)
    return text if text.isascii() and text.isdecimal() else ""


def _millis(value: object) -> int | None:
    text = _number(value)
    return int(text) if text and len(text) <= 19 else None


def _hashed(rows: Iterable[str]) -> str:
    return hashlib.blake2b("\n".join(sorted(rows)).encode(), digest_size=12).hexdigest()
