"""What peers call: their changes in batches, and the digests anti-entropy compares.

POST peerreplication/batch: a peer's changes, applied item by item (contract 11.4).

Every item is a replication, so nothing here is sent on to other peers (one hop). Items are
applied in order, a slice at a time between which the loop gets a turn. Each item gets its own
answer in the same order, and a bad item never stops the rest of the batch:

    200  applied
    404  no such instance (a heartbeat's sender then sends the full registration)
    409  our copy is newer; `responseEntity` carries it, for the sender to adopt
    400  the item is malformed (Eureka would answer 200 or 500); `error` and `detail` say why

A body that is not a replication batch at all is a 400 for the whole request.

GET peerreplication/digest: per-application digests (peers/digest.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import structlog
from aiohttp import web

from registry import errors
from registry.appkeys import CLOCK, DIGESTS, REGISTRY
from registry.codec import instance_from_wire, json_codec, wire
from registry.core import Registry
from registry.http import params
from registry.http.error_handling import status_for
from registry.http.negotiation import read_document
from registry.model import InstanceStatus, ReplicationAction
from registry.overrides import note_from, notes_document
from registry.tasks import Pacer

log = structlog.get_logger()

_A = ReplicationAction
_ACTIONS = {action.value: action for action in ReplicationAction}
_APPLIED: dict[str, Any] = {"statusCode": 200}  # the answer of most items: one object for all


async def batch(request: web.Request) -> web.Response:
    items = await read_document(request, root="replicationList")
    if not isinstance(items, list):
        raise errors.BadInput("replicationList", 'the body must be {"replicationList": [...]}')
    registry, clock, skew_ms = request.app[REGISTRY], request.app[CLOCK], params.skew_ms(request)
    # A large batch (a peer's registration storm) is applied a slice at a time, so it never
    # holds the loop for long; after each turn the loop had, the time is read again.
    pacer, now_ms = Pacer(), clock.wall_ms()
    answers, refused, first = [], 0, ""
    for item in items:
        answered = answer(registry, item, now_ms, skew_ms)
        answers.append(answered)
        if answered["statusCode"] == 400:
            refused += 1
            first = first or f"{_describe(item)}: {answered['detail']}"
        if await pacer.pace():
            now_ms = clock.wall_ms()
    if refused:  # one line a batch, however many items it refused
        log.warning("replication_items_refused", refused=refused, of=len(items), first=first)
    return web.Response(
        body=orjson.dumps({"responseList": answers}), content_type="application/json"
    )


async def digests(request: web.Request) -> web.Response:
    """`{"index": N, "applications": {"APP": "hex", ...}, "overrideNotes": [...]}`: the
    notes of the overrides in force go along, for the peer to take those it lacks."""
    registry = request.app[REGISTRY]
    body = {
        "index": registry.index,
        "applications": request.app[DIGESTS].current(),
        "overrideNotes": notes_document(registry.notes, registry.overrides()),
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def answer(registry: Registry, item: object, now_ms: int, skew_ms: int) -> dict[str, Any]:
    """Apply one item; its entry in `responseList`."""
    try:
        apply(registry, item, now_ms, skew_ms)
    except errors.StaleReplica as stale:
        return {"statusCode": 409, "responseEntity": json_codec.instance_dict(stale.lease)}
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
        registry.register(instance, now_ms=now_ms, is_replication=True)
    elif action is _A.HEARTBEAT:
        overridden = wire.status(
            item.get("overriddenStatus"), "overriddenStatus", default=InstanceStatus.UNKNOWN
        )
        registry.renew(app, iid, now_ms, True, last_dirty_ms, overridden)
    elif action is _A.CANCEL:
        registry.cancel(app, iid, now_ms=now_ms, is_replication=True)
    elif action is _A.STATUS_UPDATE:
        status = wire.status(item.get("status"), "status", default=InstanceStatus.UNKNOWN)
        if status is InstanceStatus.UNKNOWN:
            raise errors.BadInput("status", "a StatusUpdate item must name a status")
        note = note_from(item, app, status)  # read before anything is applied
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
        registry.delete_status_override(
            app, iid, now_ms=now_ms, status=status, last_dirty_ms=last_dirty_ms, is_replication=True
        )


def _required_text(item: Mapping[str, Any], key: str) -> str:
    value = wire.text(item, key)
    if not value:
        raise errors.BadInput(key, "missing")
    return value


def _describe(item: object) -> str:
    """A short rendering of an item for the log: enough to find it, never a whole body."""
    text = orjson.dumps(item, default=repr).decode() if item is not None else "null"
    return text if len(text) <= 200 else text[:200] + "..."
