"""What operators call: status overrides and metadata (contract 3.4-3.6, 3.16)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import orjson
from aiohttp import web
from msgspec.structs import replace

from registry.appkeys import CHECKER, CLOCK, REGISTRY, WRITER
from registry.checks.spec import KIND as CHECK_KEYS
from registry.codec import wire
from registry.core.model import InstanceStatus
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.errors import BadInput, NotServed, StoreUnavailable, UnknownInstance, shown
from registry.http import auth, params
from registry.http.durability import committed
from rules import CHAIN, trace

WEIGHT_KEY = "weight"  # the metadata Spring Cloud LoadBalancer's weighted choice reads


async def set_status_override(request: web.Request) -> web.Response:
    """PUT apps/{app}/{id}/status?value=OUT_OF_SERVICE[&reason=...][&expires=8h]"""
    query = params.query_string(request)
    if params.is_replication(request) and params.query_value(query, "value") == "UNKNOWN":
        # A stock peer's, from its record after an admin's bare DELETE: no decision in force.
        return await delete_status_override(request)
    status = params.required_status(request)
    now_ms = request.app[CLOCK].wall_ms()
    reason, expires_ms = params.reason(query), params.expires_ms(query, now_ms=now_ms)
    app, iid = params.app_name(request), request.match_info["id"]
    request.app[REGISTRY].set_status_override(
        app,
        iid,
        status,
        now_ms=now_ms,
        last_dirty_ms=params.checked_dirty_ms(request, query, now_ms=now_ms),
        is_replication=params.is_replication(request),
        note=Note(app, status, reason, now_ms, expires_ms, by=_admin(request)),
    )
    await committed(request, "override")
    return web.Response()


async def delete_status_override(request: web.Request) -> web.Response:
    """DELETE apps/{app}/{id}/status[?value=UP]; without a value the status becomes UNKNOWN."""
    status = params.optional_status(request) or InstanceStatus.UNKNOWN
    now_ms = request.app[CLOCK].wall_ms()
    request.app[REGISTRY].delete_status_override(
        params.app_name(request),
        request.match_info["id"],
        now_ms=now_ms,
        status=status,
        last_dirty_ms=params.checked_dirty_ms(request, params.query_string(request), now_ms=now_ms),
        is_replication=params.is_replication(request),
        by=_admin(request),
    )
    await committed(request, "override")
    return web.Response()


async def update_metadata(request: web.Request) -> web.Response:
    """PUT apps/{app}/{id}/metadata?key=value&...: merges every parameter into the metadata."""
    try:  # strictly: a percent escape that is no UTF-8 (%FF) would be stored as U+FFFD
        pairs = parse_qsl(params.query_string(request), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise BadInput("metadata", "a percent escape is not UTF-8 (as %FF): send UTF-8") from None
    entries: dict[str, str] = {}
    for key, value in pairs:
        if not key:
            raise BadInput("metadata", "keys must not be empty")
        if key == "@class":  # it would be read back as Java's type marker and dropped
            raise BadInput("metadata", "@class is Java's type marker in a metadata map, not a key")
        if key not in entries:  # the first value of a repeated key, as Eureka takes it
            wire.check_text(key, "metadata")
            wire.check_text(value, f"metadata.{key}")
            entries[key] = value
    weight = entries.get(WEIGHT_KEY)
    if weight is not None and not (
        weight.isascii() and weight.isdigit() and 0 < int(weight) <= wire.JAVA_INT_MAX
    ):
        # Spring Cloud LoadBalancer would ignore it and weigh the instance 1: say so now.
        raise BadInput(f"metadata.{WEIGHT_KEY}", f"{shown(weight)} is not a whole number above 0")
    registry, app, iid = request.app[REGISTRY], params.app_name(request), request.match_info["id"]
    now_ms = request.app[CLOCK].wall_ms()
    checker = request.app[CHECKER]
    if checker is not None and any(key.startswith(CHECK_KEYS) for key in entries):
        instance = registry.get(app, iid, now_ms=now_ms).instance
        changed = replace(instance, metadata={**instance.metadata, **entries})
        checker.admit(changed, None)  # the check it would ask for (an admin's: no quota)
    registry.update_metadata(app, iid, entries, now_ms=now_ms)
    return web.Response()


async def status_overrides(request: web.Request) -> web.Response:
    """GET /eureka/serverinfo/statusoverrides: every override in force, id -> status."""
    overrides = {iid: status.value for iid, status in request.app[REGISTRY].overrides.items()}
    return web.Response(body=orjson.dumps(overrides), content_type="application/json")


async def overrides(request: web.Request) -> web.Response:
    """GET {base}overrides: every override in force, with why, since when and until when."""
    registry = request.app[REGISTRY]
    notes = registry.overrides.notes
    listed = []
    for iid, status in registry.overrides.items():
        note = notes.of(iid, status)
        listed.append(
            {
                "app": note.app if note is not None else _app_of(registry, iid),
                "instanceId": iid,
                "status": status.value,
                "reason": note.reason if note is not None else None,
                "setAt": note.set_ms if note is not None else None,
                "setBy": note.by if note is not None else None,
                "expiresAt": note.expires_ms if note is not None else None,
            }
        )
    listed.sort(key=lambda o: (str(o["app"]), str(o["instanceId"])))
    return web.Response(body=orjson.dumps({"overrides": listed}), content_type="application/json")


HISTORY_PAGE = 1000  # changes a history read answers by default
HISTORY_PAGE_MAX = 10_000


async def override_history(request: web.Request) -> web.Response:
    """GET {base}overrides/history[?since=MS][&after=N][&limit=N]: overrides set, deleted
    and expired, and the instances cancelled under them, oldest first, a page at a time:
    `next`, when not null, is the `after` of the next page. What is pending is written first,
    so the history holds every change made before the read."""
    query = params.query_string(request)
    since = params.registry_index(params.query_value(query, "since"), "since")
    after = params.registry_index(params.query_value(query, "after"), "after")
    limit = params.registry_index(params.query_value(query, "limit"), "limit")
    if limit is not None and not 1 <= limit <= HISTORY_PAGE_MAX:
        raise BadInput("limit", f"must be from 1 to {HISTORY_PAGE_MAX}")
    writer = request.app[WRITER]
    if writer is None:
        raise NotServed("the store is off (store = false): no history is kept")
    try:
        await writer.flush()
        history, next_after = await writer.history(
            since_ms=since or 0, after=after or 0, limit=limit or HISTORY_PAGE
        )
    except Exception as exc:
        detail = f"the history cannot be read now ({type(exc).__name__}: {exc})"
        raise StoreUnavailable(detail) from None
    body = orjson.dumps({"history": history, "next": next_after})
    return web.Response(body=body, content_type="application/json")


async def explain(request: web.Request) -> web.Response:
    """GET apps/{app}/{id}/status/explain: which rule of the chain (or which admin action) gave
    the instance its status, the inputs it saw, and each rule's answer to them."""
    lease = request.app[REGISTRY].get(
        params.app_name(request), request.match_info["id"], now_ms=request.app[CLOCK].wall_ms()
    )
    instance, decision = lease.instance, lease.decision
    notes = request.app[REGISTRY].overrides.notes
    note = notes.of(instance.instance_id, instance.overridden_status)
    body: dict[str, object] = {
        "app": instance.app,
        "instanceId": instance.instance_id,
        "status": instance.status.value,
        "overriddenStatus": instance.overridden_status.value,
        "decidedBy": None if decision is None else decision.by,
        "inputs": None
        if decision is None
        else {
            "claimed": _value(decision.claimed),
            "override": _value(decision.override),
            "existingLease": _value(decision.existing),
            "replication": decision.replication,
        },
        "chain": []
        if decision is None
        else [{"rule": name, "answer": _value(answer)} for name, answer in trace(CHAIN, decision)],
        "override": None
        if note is None
        else {
            "reason": note.reason,
            "setAt": note.set_ms,
            "setBy": note.by,
            "expiresAt": note.expires_ms,
        },
        "healthCheck": _health_check(request, instance.instance_id),
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _health_check(request: web.Request, instance_id: str) -> dict[str, object] | None:
    """The server-side check of the instance, if it asks for one: where it goes, its last
    result, and whether it holds the instance DOWN (then its claim was DOWN, for the chain)."""
    checker = request.app[CHECKER]
    check = None if checker is None else checker.status_of(instance_id)
    held = request.app[REGISTRY].checks.get(instance_id)
    if check is None and held is None:
        return None
    return {
        **(check or {}),
        "heldDown": held is not None,
        "heldDownSince": None if held is None else held.since_ms,
        "heldDownBecause": None if held is None else held.detail,
        "clientClaims": None if held is None else held.claim.value,
    }


def _admin(request: web.Request) -> str | None:
    """The admin who made this call, for the audit trail; a peer's replication names nobody."""
    return None if params.is_replication(request) else auth.principal(request)


def _value(status: InstanceStatus | None) -> str | None:
    return None if status is None else status.value


def _app_of(registry: Registry, instance_id: str) -> str | None:
    try:
        return registry.find(instance_id, now_ms=0).instance.app
    except UnknownInstance:
        return None
