"""What instances call about themselves: register, heartbeat, cancel (contract 3.1-3.3)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler
from msgspec.structs import replace

from registry.appkeys import CHECKER, CLOCK, MEMORY, QUOTAS, REGISTRY, SETTINGS
from registry.checks.destinations import OutsideNetworks
from registry.checks.spec import KIND as CHECK_KIND
from registry.codec import instance_from_wire, wire
from registry.codec.wire import ERROR_HEADER, REGISTRATION_HEADER
from registry.common.clock import Clock
from registry.core.checks import SERVER_LEASE_KEY, held_by_server
from registry.core.model import InstanceInfo, InstanceStatus
from registry.core.registry import Registry
from registry.errors import BadInput, Forbidden, MemoryFull, UnknownInstance
from registry.http import auth, params
from registry.http.credentials import Credentials
from registry.http.durability import committed
from registry.http.negotiation import read_document
from registry.settings import Settings


def _may_hold_lease(request: web.Request, instance: InstanceInfo) -> None:
    """An instance whose lease the registry holds (core/checks.py) is an admin's to register,
    and needs a check: nothing else would ever mark it DOWN."""
    if not auth.may_administer(request):
        raise Forbidden(f"{SERVER_LEASE_KEY} = server: only an admin registers such an instance")
    if not request.app[SETTINGS].checks.enabled:
        raise BadInput(
            f"metadata.{SERVER_LEASE_KEY}",
            "checks.enabled is false on this node: an instance the registry holds would never be "
            "checked, nor ever evicted",
        )
    if CHECK_KIND not in instance.metadata:
        raise BadInput(
            f"metadata.{SERVER_LEASE_KEY}",
            f"an instance the registry holds needs a check ({CHECK_KIND} = http or tcp): "
            "nothing else would ever mark it DOWN",
        )


async def register(request: web.Request) -> web.Response:
    """POST apps/{app}: 204, which is what Java clients count as success."""
    app = params.app_name(request)
    auth.may_act_on(request, app)
    document = await read_document(request, root="instance")
    now_ms = request.app[CLOCK].wall_ms()
    instance = instance_from_wire(document, now_ms=now_ms, expected_app=app)
    wire.not_ahead(
        instance.last_dirty_ms,
        "lastDirtyTimestamp",
        now_ms=now_ms,
        skew_ms=params.skew_ms(request),
    )
    replication = params.is_replication(request)
    dated_ahead = None
    if not replication:  # a peer's copy was held to these where it was registered
        instance, dated_ahead = _dated_here(instance, now_ms, request.app[SETTINGS])
        auth.may_give_vips(request, instance)
    checker, user = request.app[CHECKER], auth.client_user(request)
    asks_check, unchecked = False, None
    if not replication and checker is not None:  # a peer's copy was held to these where it
        try:  # was registered
            asks_check = checker.admit(instance, user)
        except OutsideNetworks as outside:  # registered, unchecked: the operator's to list
            unchecked = f"registered, not checked: {outside}"
    if not replication:
        if held_by_server(instance):
            _may_hold_lease(request, instance)
        else:
            held = request.app[REGISTRY].instance_or_none(app, instance.instance_id, now_ms=now_ms)
            if held is not None and held_by_server(held) and not auth.may_administer(request):
                raise Forbidden(
                    f"{app}/{instance.instance_id} is held by the registry "
                    f"({SERVER_LEASE_KEY} = server): a client does not take it over"
                )
    if instance.overridden_status is not InstanceStatus.UNKNOWN and not (
        replication or auth.may_administer(request)
    ):
        # A registration carrying an override sets it (contract 6.2, step 5): how peers hand
        # one over. From a client's credential it would bypass the admin plane: not taken.
        instance = replace(instance, overridden_status=InstanceStatus.UNKNOWN)
    registry, memory = request.app[REGISTRY], request.app[MEMORY]
    if (
        not replication
        and memory.full
        and registry.instance_or_none(app, instance.instance_id, now_ms=now_ms) is None
    ):
        raise MemoryFull(
            f"this node's memory is above its watermark ({memory.watermark >> 20} MiB): new "
            "instances are refused until it falls; register with another node"
        )
    quotas = request.app[QUOTAS]
    if quotas is not None and user is not None and not replication:
        quotas.admit(user, app, instance.instance_id)
    kept = registry.register(instance, now_ms=now_ms, is_replication=replication)
    if quotas is not None and user is not None and not replication:
        quotas.registered(user, app, instance.instance_id)
    if asks_check and checker is not None and user is not None:
        checker.quota.asked(user, instance.instance_id)
    if kept.last_dirty_ms > instance.last_dirty_ms:
        # Ours is newer: the registration changed nothing. Still 204, which stock clients
        # need, but saying so to whoever looks (a client re-registering after another took
        # its id with a later lastDirtyTimestamp finds out here).
        return web.Response(
            status=204,
            headers={
                REGISTRATION_HEADER: f"ignored: this registry holds a newer copy "
                f"(lastDirtyTimestamp {kept.last_dirty_ms}, yours {instance.last_dirty_ms})"
            },
        )
    said = "; ".join(note for note in (dated_ahead, unchecked) if note is not None)
    if said:
        return web.Response(status=204, headers={REGISTRATION_HEADER: said})
    return web.Response(status=204)


def _dated_here(
    instance: InstanceInfo, now_ms: int, settings: Settings
) -> tuple[InstanceInfo, str | None]:
    """`instance` with its lastDirtyTimestamp at most `leases.client_clock_skew` ahead of this
    node's clock, and what to tell its client if it was further. The timestamp decides which of two
    registrations of an id wins, here and, replicated, on every node: one dated minutes ahead
    would outrank its owner's later ones for minutes. Its client, still holding its own
    timestamp, is answered 404 at a heartbeat while ours is behind and registers again: one
    registration a heartbeat until its clock and ours agree within the skew."""
    lead_ms = int(settings.leases.client_clock_skew * 1000)
    if instance.last_dirty_ms - now_ms <= lead_ms:
        return instance, None
    said = (
        f"dated ahead: lastDirtyTimestamp {instance.last_dirty_ms} taken as {now_ms + lead_ms}, "
        f"{settings.leases.client_clock_skew:g} s ahead of this node's clock "
        "(leases.client_clock_skew)"
    )
    return replace(instance, last_dirty_ms=now_ms + lead_ms), said


def heartbeat_handler(
    registry: Registry, clock: Clock, skew_ms: int, credentials: Credentials | None
) -> Handler:
    """PUT apps/{app}/{id}, the heartbeat, for `registry`. `status` is ignored, as in Eureka;
    a lastDirtyTimestamp more than `skew_ms` ahead of the clock is refused.

    The hot path of the whole server: the handler is built with its registry and clock bound,
    so a request costs no application lookups, and it parses only what it uses.
    """
    renew, wall_ms = registry.renew, clock.wall_ms

    async def heartbeat(request: web.Request) -> web.Response:
        query = params.query_string(request)
        replication = params.is_replication(request)
        overridden = None
        if replication:
            raw = params.query_value(query, "overriddenstatus")
            overridden = wire.status(raw, "overriddenstatus", default=InstanceStatus.UNKNOWN)
        match, now_ms = request.match_info, wall_ms()
        last_dirty_ms = params.last_dirty_ms(query)
        if last_dirty_ms is not None and last_dirty_ms - now_ms > skew_ms:
            wire.not_ahead(last_dirty_ms, "lastDirtyTimestamp", now_ms=now_ms, skew_ms=skew_ms)
        app = match["app"].upper()
        if credentials is not None and credentials.applications:  # bound credentials: check
            auth.may_act_on(request, app)
        try:  # StaleReplica: the error table answers 409 with our copy
            renew(app, match["id"], now_ms, replication, last_dirty_ms, overridden)
        except UnknownInstance as unknown:
            # Empty, as Eureka's: Netflix's Jersey clients read any body of a heartbeat's
            # answer as an instance, and one that is not fails the heartbeat instead of
            # making the client register again.
            return web.Response(status=404, headers={ERROR_HEADER: unknown.code})
        return web.Response()

    return heartbeat


async def cancel(request: web.Request) -> web.Response:
    """DELETE apps/{app}/{id}: the instance leaves; an admin's override on it stays, and the
    override's history says who cancelled it."""
    registry, app, iid = request.app[REGISTRY], params.app_name(request), request.match_info["id"]
    auth.may_act_on(request, app)
    now_ms, replication = request.app[CLOCK].wall_ms(), params.is_replication(request)
    held = registry.instance_or_none(app, iid, now_ms=now_ms)
    server_held = held is not None and held_by_server(held)
    if server_held and not replication and not auth.may_administer(request):
        raise Forbidden(
            f"{app}/{iid} is held by the registry ({SERVER_LEASE_KEY} = server): an admin "
            "removes it"
        )
    by = None if replication else auth.principal(request)
    registry.cancel(app, iid, now_ms=now_ms, is_replication=replication, by=by)
    if not replication:  # the peer that sent it kept it before it was sent
        await committed(request, "cancel")
    return web.Response()
