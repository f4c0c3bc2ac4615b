"""What discovery clients read: the registry, its delta, one app, one instance, VIPs (3.7-3.12).

Documents come from the response cache, built by `registry.reads.payloads` on a miss.
"""

from __future__ import annotations

from aiohttp import web

from registry.appkeys import (
    CACHE,
    CATALOG,
    CLOCK,
    FEED,
    JOURNAL,
    LIFECYCLE,
    REGISTRY,
    SETTINGS,
    ZONED,
)
from registry.codec import encode_instance
from registry.codec.wire import SINCE_HEADER
from registry.common.tasks import Pacer
from registry.core.model import Lease
from registry.core.registry import Registry
from registry.errors import IndexExpired, NotServed, UnknownApplication
from registry.http import params
from registry.http.negotiation import (
    cached_payload,
    document_format,
    document_response,
    payload,
    response_format,
)
from registry.reads import cache, payloads
from registry.reads.journal import DeltaJournal

MAX_WAIT = 300.0  # seconds a long-poll is held at most; longer waits are cut to this


async def full_registry(request: web.Request) -> web.Response:
    """GET apps"""
    request.app[LIFECYCLE].check_reads()
    registry, catalog, clock = request.app[REGISTRY], request.app[CATALOG], request.app[CLOCK]
    fmt = document_format(request)
    if params.is_replication(request):  # a peer copying leases: their renewals as of now
        document = await payloads.current_registry(registry, catalog, fmt, pacer=Pacer())
        return await document_response(request, fmt, document)
    zone = params.zone(request)
    if zone is not None:
        return await cached_payload(
            request,
            (cache.APPS, zone),
            fmt,
            lambda: payloads.zoned_registry(
                registry, request.app[ZONED], fmt, zone, now=clock.monotonic()
            ),
            prepare=lambda: catalog.prepare(fmt, now=clock.monotonic(), pacer=Pacer()),
            otherwise=lambda: payloads.no_vip(registry, fmt, payloads.FULL_FETCH_VERSION),
        )
    return await cached_payload(
        request,
        (cache.APPS,),
        fmt,
        lambda: payloads.full_registry(registry, catalog, fmt, now=clock.monotonic()),
        prepare=lambda: catalog.prepare(fmt, now=clock.monotonic(), pacer=Pacer()),
    )


async def delta(request: web.Request) -> web.Response:
    """GET apps/delta; with `?index=N` the changes after index N only, and with `&wait=30s`
    held until there are some (a long-poll), or answered empty when the wait is over."""
    request.app[LIFECYCLE].check_reads()
    if request.app[SETTINGS].reads.disable_delta:
        raise NotServed("deltas are disabled on this server; fetch apps/ instead")
    registry, journal, clock = request.app[REGISTRY], request.app[JOURNAL], request.app[CLOCK]
    if journal.purge(now_ms=clock.wall_ms()):  # cheap when nothing is due: retention is exact
        request.app[CACHE].drop_delta()
    fmt = document_format(request)
    since = epoch = wait = None
    if request.app[SETTINGS].reads.long_poll:  # else, as a stock Eureka server: never read
        query = params.query_string(request)
        since = params.registry_index(params.query_value(query, "index"), "index")
        epoch = params.query_value(query, "epoch")
        wait = params.wait_seconds(query)
    if since is None and wait is None:
        return await cached_payload(
            request,
            (cache.DELTA,),
            fmt,
            lambda: payloads.delta(registry, journal, fmt, now_ms=clock.wall_ms()),
            prepare=lambda: journal.prepare(fmt, now_ms=clock.wall_ms(), pacer=Pacer()),
        )
    if since is None:
        since = registry.index
    check_index(registry, journal, since, epoch)
    if wait and registry.index <= since:
        feed = request.app[FEED]
        feed.polls += 1
        try:
            await feed.wait_past(since, min(wait, MAX_WAIT))
        finally:
            feed.polls -= 1
    changed = journal.since(since)
    if changed is None:  # the wait outlasted the journal's memory of index `since`
        raise IndexExpired(forgotten(journal, since))
    response = await cached_payload(
        request,
        (cache.SINCE, since),
        fmt,
        lambda: payloads.changes(registry, changed, fmt),
    )
    # Says the answer holds the changes after `since` only, so a client can tell a server
    # that long-polls from one that ignored the parameters (a stock Eureka server).
    response.headers[SINCE_HEADER] = str(since)
    return response


def check_index(
    registry: Registry, journal: DeltaJournal, index: int, epoch: str | None = None
) -> None:
    """Refuse (410) an index whose later changes this node cannot list."""
    if (epoch and epoch != registry.epoch) or index > registry.index:
        raise IndexExpired(
            f"index {index} is not one of this node's (epoch {registry.epoch}, at index "
            f"{registry.index}): another node's, or from before a restart; fetch apps/ in "
            "full and go on from its X-Registry-Index"
        )
    if index < journal.forgotten_index:
        raise IndexExpired(forgotten(journal, index))


def forgotten(journal: DeltaJournal, index: int) -> str:
    return (
        f"changes after index {index} are no longer kept (they go after "
        f"{journal.retention_ms // 1000} s); fetch apps/ in full and go on from its "
        "X-Registry-Index"
    )


async def application(request: web.Request) -> web.Response:
    """GET apps/{app}"""
    request.app[LIFECYCLE].check_reads()
    name = params.app_name(request)
    registry, catalog, clock = request.app[REGISTRY], request.app[CATALOG], request.app[CLOCK]
    if not registry.application(name):
        raise UnknownApplication(f"no instance of application {name!r} is registered")
    fmt = document_format(request)
    if params.is_replication(request):  # a peer copying leases: their renewals as of now
        document = await payloads.current_application(registry, catalog, name, fmt, pacer=Pacer())
        return await document_response(request, fmt, document)
    zone = params.zone(request)
    if zone is not None:
        return await cached_payload(
            request,
            (cache.APP, name, zone),
            fmt,
            lambda: payloads.zoned_application(registry, catalog, name, fmt, zone),
            otherwise=lambda: payloads.no_instances(registry, name, fmt),
        )
    return await cached_payload(
        request,
        (cache.APP, name),
        fmt,
        lambda: payloads.application(registry, catalog, name, fmt, now=clock.monotonic()),
    )


async def instance(request: web.Request) -> web.Response:
    """GET apps/{app}/{id}: hidden once its lease has expired."""
    lease = request.app[REGISTRY].get(
        params.app_name(request), request.match_info["id"], now_ms=request.app[CLOCK].wall_ms()
    )
    return _instance_payload(request, lease)


async def instance_by_id(request: web.Request) -> web.Response:
    """GET instances/{id}: the same, in the one application that holds the id (409 when
    several do)."""
    lease = request.app[REGISTRY].find_only(
        request.match_info["id"], now_ms=request.app[CLOCK].wall_ms()
    )
    return _instance_payload(request, lease)


async def vip(request: web.Request) -> web.Response:
    """GET vips/{vip}"""
    return await _vip_payload(request, secure=False)


async def secure_vip(request: web.Request) -> web.Response:
    """GET svips/{svip}"""
    return await _vip_payload(request, secure=True)


def _instance_payload(request: web.Request, lease: Lease) -> web.Response:
    fmt = response_format(request)
    return payload(request, fmt, encode_instance(fmt, lease))


async def _vip_payload(request: web.Request, *, secure: bool) -> web.Response:
    request.app[LIFECYCLE].check_reads()
    address = request.match_info["vip"]
    registry, catalog = request.app[REGISTRY], request.app[CATALOG]
    fmt, zone = document_format(request), params.zone(request)
    return await cached_payload(
        request,
        (cache.VIP, secure, address) if zone is None else (cache.VIP, secure, address, zone),
        fmt,
        lambda: payloads.vip(registry, catalog, address, fmt, secure=secure, zone=zone),
        otherwise=lambda: payloads.no_vip(registry, fmt),
    )
