"""What peers call: their changes in batches, and the digests anti-entropy compares.

POST peerreplication/batch: a peer's changes, applied item by item (contract 11.4).

Every item is a replication, so nothing here is sent on to other peers (one hop). Items are
applied in order, a slice at a time between which the loop gets a turn. Each item gets its own
answer in the same order, and a bad item never stops the rest of the batch:

    200  applied
    404  no such instance (a heartbeat's sender then sends the full registration)
    409  our copy is newer; `responseEntity` carries it, for the sender to adopt; or
         (`"error": "removed_here"`) we removed the instance after the copy sent, and
         `removedAt` and `lastDirtyTimestamp` say so, for the sender to remove it too
    400  the item is malformed (Eureka would answer 200 or 500); `error` and `detail` say why

A body that is not a replication batch at all is a 400 for the whole request, and so is one of
more than MAX_BATCH_ITEMS items. The copies 409s carry back are bounded too: beyond
COPY_BYTES_PER_BYTE times the request's size (and COPY_BYTES_FLOOR), a 409 goes without its
copy (anti-entropy brings it): a 900 KB batch of heartbeats for fat instances drew a 45 MB
answer.

GET peerreplication/digest: per-application digests (peers/digest.py), with the overrides'
notes and the override removals remembered.

GET peerreplication/removed[?app=APP]: the removals remembered (registry/core/tombstones.py), of
one application or all, for anti-entropy and start-up sync.

Any of these calls tells this node a peer is up: a peer it could not reach is tried again at
once rather than after its pause (peers/dispatcher.py).

Fields of ours in the items (stock Eureka peers ignore them): a Cancel carries the
`lastDirtyTimestamp` of the copy it removed and `removedAt`; a DeleteStatusOverride carries
`overrideRemovedAt`; a StatusUpdate the override's note (registry/core/overrides.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import structlog
from aiohttp import hdrs, web
from orjson import Fragment

from registry import errors
from registry.appkeys import CHECKER, CLOCK, CLUSTER, DIGESTS, REGISTRY
from registry.codec import instance_from_wire, json_codec, wire
from registry.codec.checks import (
    app_check_from_fields,
    app_check_removal_from_fields,
    app_checks_document,
    held_from_item,
    holds_document,
)
from registry.codec.notes import note_from, notes_document, removals_document
from registry.common.tasks import Pacer
from registry.core.conflicts import RemovedHere, StaleReplica
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from registry.http import params
from registry.http.error_handling import status_for
from registry.http.negotiation import read_document
from registry.settings import MAX_BATCH_ITEMS

log = structlog.get_logger()

_A = ReplicationAction
_ACTIONS = {action.value: action for action in ReplicationAction}
_APPLIED: dict[str, Any] = {"statusCode": 200}  # the answer of most items: one object for all
COPY_BYTES_PER_BYTE = 4
COPY_BYTES_FLOOR = 64 * 1024
_NO_COPY: dict[str, Any] = {
    "statusCode": 409,
    "error": "stale_replica",
    "detail": "our copy is newer; this answer's room for copies is spent: anti-entropy brings it",
}


async def batch(request: web.Request) -> web.Response:
    request.app[CLUSTER].heard_from_a_peer()
    items = await read_document(request, root="replicationList")
    if not isinstance(items, list):
        raise errors.BadInput("replicationList", 'the body must be {"replicationList": [...]}')
    if len(items) > MAX_BATCH_ITEMS:
        raise errors.BadInput(
            "replicationList", f"{len(items)} items; a batch holds at most {MAX_BATCH_ITEMS}"
        )
    room = max(COPY_BYTES_FLOOR, COPY_BYTES_PER_BYTE * (request.content_length or 0))
    registry, clock, skew_ms = request.app[REGISTRY], request.app[CLOCK], params.skew_ms(request)
    # A large batch (a peer's registration storm) is applied a slice at a time, so it never
    # holds the loop for long; after each turn the loop had, the time is read again.
    pacer, now_ms = Pacer(), clock.wall_ms()
    answers, refused, first = [], 0, ""
    for item in items:
        answered = answer(registry, item, now_ms, skew_ms)
        copy = answered.get("responseEntity")
        if copy is not None:  # encoded here, to be counted against the room for copies
            encoded = orjson.dumps(copy)
            room -= len(encoded)
            answered = _NO_COPY if room < 0 else {**answered, "responseEntity": Fragment(encoded)}
        answers.append(answered)
        if answered["statusCode"] == 400:
            refused += 1
            first = first or f"{_describe(item)}: {answered['detail']}"
        if await pacer.pace():
            now_ms = clock.wall_ms()
    if refused:  # one line a batch, however many items it refused
        log.warning("replication_items_refused", refused=refused, of=len(items), first=first)
    headers = request.headers
    ours = (
        wire.PEER_HEADER in headers or headers.get(hdrs.USER_AGENT) == wire.REPLICATION_USER_AGENT
    )
    if not ours:
        # A stock Eureka peer reads each answer strictly: a field it does not know fails the
        # whole batch. It gets Eureka's statusCode (and the copy of a 409) alone.
        answers = [answered if len(answered) == 1 else _eurekas(answered) for answered in answers]
    return web.Response(
        body=orjson.dumps({"responseList": answers}),
        content_type="application/json",
        headers=_checks_header(request) if ours else None,
    )


async def digests(request: web.Request) -> web.Response:
    """`{"index": N, "applications": {"APP": "hex", ...}, "overrideNotes": [...]}`: the
    notes of the overrides in force go along, for the peer to take those it lacks."""
    request.app[CLUSTER].heard_from_a_peer()
    registry = request.app[REGISTRY]
    applications = await request.app[DIGESTS].current(Pacer())
    body = {
        "index": registry.index,
        "applications": applications,
        "overrideNotes": notes_document(registry.overrides.notes, registry.overrides),
        "overridesRemoved": removals_document(registry.overrides.notes),
        "checkHolds": holds_document(registry.checks),
        "appChecks": app_checks_document(registry.app_checks),
        # The instances this node checks: its word on whether they are held is the last.
        "checkVerdicts": await _verdicts(request),
    }
    return web.Response(
        body=orjson.dumps(body), content_type="application/json", headers=_checks_header(request)
    )


async def _verdicts(request: web.Request) -> dict[str, dict[str, object]]:
    checker = request.app[CHECKER]
    if checker is None:
        return {}
    verdicts = await checker.verdicts()
    return {iid: {"app": app, "held": held} for iid, (app, held) in verdicts.items()}


def _checks_header(request: web.Request) -> dict[str, str]:
    return {wire.CHECKS_HEADER: "off" if request.app[CHECKER] is None else "on"}


async def removed(request: web.Request) -> web.Response:
    """`{"removed": [{"appName", "id", "lastDirtyTimestamp", "removedAt", "expired"}, ...]}`:
    the removals this node remembers (`expired`: by eviction, not a cancel), of the
    application `app` names, or of all."""
    request.app[CLUSTER].heard_from_a_peer()
    tombstones = request.app[REGISTRY].tombstones
    app = params.query_value(params.query_string(request), "app")
    chosen = tombstones if app is None else tombstones.of(app.upper())
    body = {"removed": [removal_item(t) for t in chosen]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _eurekas(answered: dict[str, Any]) -> dict[str, Any]:
    """An item's answer with Eureka's fields alone."""
    return {key: value for key, value in answered.items() if key in _EUREKAS}


_EUREKAS = frozenset({"statusCode", "responseEntity"})


def removal_item(removal: Tombstone) -> dict[str, Any]:
    return {
        "appName": removal.app,
        "id": removal.instance_id,
        "lastDirtyTimestamp": removal.dirty_ms,
        "removedAt": removal.at_ms,
        "expired": removal.expired,
    }


def answer(registry: Registry, item: object, now_ms: int, skew_ms: int) -> dict[str, Any]:
    """Apply one item; its entry in `responseList`."""
    try:
        apply(registry, item, now_ms, skew_ms)
    except StaleReplica as stale:
        return {"statusCode": 409, "responseEntity": json_codec.instance_dict(stale.lease)}
    except RemovedHere as exc:
        return {"statusCode": 409, "error": exc.code, **removal_item(exc.removal)}
    except errors.RegistryError as exc:
        code = status_for(exc)
        if code == 500:
            log.exception("replication_item_failed", item=_describe(item))
        return {"statusCode": code, "error": exc.code, "detail": str(exc)}
    except Exception:
        log.exception("replication_item_failed", item=_describe(item))
        return {"statusCode": 500, "error": "internal_error", "detail": "see the server log"}
    return _APPLIED


def apply(registry: Registry, item: object, now_ms: int, skew_ms: int) -> None:
    """Run the command one item describes, as a replication; raises what the command raises.
    A lastDirtyTimestamp more than `skew_ms` ahead of the clock refuses the item."""
    if type(item) is not dict and not isinstance(item, Mapping):  # JSON gives dicts: no ABC
        raise errors.BadInput("replicationList[]", "each item must be an object")
    named = item.get("action")
    action = _ACTIONS.get(named) if isinstance(named, str) else None
    if action is None:
        raise errors.BadInput("action", f"must be one of {sorted(_ACTIONS)}")
    if action is _A.APP_CHECK:
        _apply_app_check(registry, item, now_ms, skew_ms)
        return
    app = _required_text(item, "appName").upper()
    iid = _required_text(item, "id")
    last_dirty_ms = wire.not_ahead(
        wire.timestamp(item.get("lastDirtyTimestamp"), "lastDirtyTimestamp"),
        "lastDirtyTimestamp",
        now_ms=now_ms,
        skew_ms=skew_ms,
    )
    if action is _A.REGISTER:
        info = item.get("instanceInfo")
        if info is None:
            raise errors.BadInput("instanceInfo", "a Register item must carry the instance")
        instance = instance_from_wire(info, now_ms=now_ms, expected_app=app)
        wire.not_ahead(
            instance.last_dirty_ms,
            "instanceInfo.lastDirtyTimestamp",
            now_ms=now_ms,
            skew_ms=skew_ms,
        )
        # The sender's last renewal: what a removal here is weighed against (a stock peer
        # sends none; its registration counts as made now).
        lease_info = info.get("leaseInfo") if isinstance(info, Mapping) else None
        renewed = wire.timestamp(
            lease_info.get("lastRenewalTimestamp") if isinstance(lease_info, Mapping) else None,
            "instanceInfo.leaseInfo.lastRenewalTimestamp",
        )
        # A check's hold, as the sender has it: taken before the registration, which the
        # chain then decides with it (registry/core/checks.py); unless ours is newer, and
        # the registration keeps ours (with our hold).
        holds = "checkHeld" in item and not registry.keeps_ours(instance)
        if holds:
            before = registry.checks.take(iid, held_from_item(item["checkHeld"]))
        try:
            registry.register(
                instance, now_ms=now_ms, is_replication=True, last_renewal_ms=renewed or now_ms
            )
        except errors.RegistryError:
            if holds:
                registry.checks.take(iid, before)  # nothing was registered: nothing held
            raise
    elif action is _A.HEARTBEAT:
        overridden = wire.status(
            item.get("overriddenStatus"), "overriddenStatus", default=InstanceStatus.UNKNOWN
        )
        registry.renew(app, iid, now_ms, True, last_dirty_ms, overridden)
    elif action is _A.CANCEL:
        removed_at = wire.timestamp(item.get("removedAt"), "removedAt")
        removal = (
            None
            if removed_at is None or last_dirty_ms is None
            else Tombstone(app, iid, last_dirty_ms, min(removed_at, now_ms + skew_ms))
        )
        registry.cancel(app, iid, now_ms=now_ms, is_replication=True, removal=removal)
    elif action is _A.STATUS_UPDATE:
        if item.get("status") in (None, ""):
            raise errors.BadInput("status", "a StatusUpdate item must name a status")
        status = wire.status(item.get("status"), "status", default=InstanceStatus.UNKNOWN)
        if status is InstanceStatus.UNKNOWN:
            # A stock node's admin PUT UNKNOWN (its bare DELETE sends a DeleteStatusOverride):
            # the instance is UNKNOWN there, override or not, until its client registers.
            registry.take_unknown(app, iid, now_ms=now_ms, last_dirty_ms=last_dirty_ms)
            return
        note = note_from(item, app, status)  # read before anything is applied
        if note is not None:
            wire.not_ahead(note.set_ms, "overrideSetAt", now_ms=now_ms, skew_ms=skew_ms)
        registry.set_status_override(
            app,
            iid,
            status,
            now_ms=now_ms,
            last_dirty_ms=last_dirty_ms,
            is_replication=True,
            note=note,
        )
    else:
        status = wire.status(item.get("status"), "status", default=InstanceStatus.UNKNOWN)
        removed_at = wire.not_ahead(
            wire.timestamp(item.get("overrideRemovedAt"), "overrideRemovedAt"),
            "overrideRemovedAt",
            now_ms=now_ms,
            skew_ms=skew_ms,
        )
        registry.delete_status_override(
            app,
            iid,
            now_ms=now_ms,
            status=status,
            last_dirty_ms=last_dirty_ms,
            is_replication=True,
            removed_ms=removed_at,
        )


def _apply_app_check(
    registry: Registry, item: Mapping[str, Any], now_ms: int, skew_ms: int
) -> None:
    """An admin's check on an application, set or removed on the peer: the later decision
    wins (registry/core/app_checks.py)."""
    if "appCheck" in item:
        check = app_check_from_fields(item["appCheck"])
        wire.not_ahead(check.set_ms, "appCheck.setAt", now_ms=now_ms, skew_ms=skew_ms)
        registry.set_app_check(check, now_ms=now_ms, is_replication=True)
        return
    app, at_ms = app_check_removal_from_fields(item.get("appCheckRemoved"))
    wire.not_ahead(at_ms, "appCheckRemoved.removedAt", now_ms=now_ms, skew_ms=skew_ms)
    registry.remove_app_check(app, at_ms=at_ms, now_ms=now_ms, is_replication=True)


def _required_text(item: Mapping[str, Any], key: str) -> str:
    value = wire.text(item, key)
    if not value:
        raise errors.BadInput(key, "missing")
    return value


def _describe(item: object) -> str:
    """A short rendering of an item for the log: enough to find it, never a whole body."""
    text = orjson.dumps(item, default=repr).decode() if item is not None else "null"
    return text if len(text) <= 200 else text[:200] + "..."
