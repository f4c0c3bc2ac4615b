"""What discovery clients read: the registry, its delta, one app, one instance, VIPs (3.7-3.12).

Documents come from the response cache, built by `registry.payloads` on a miss.
"""

from __future__ import annotations

from aiohttp import web

from registry import cache, payloads
from registry.appkeys import CACHE, CLOCK, JOURNAL, READS, REGISTRY, SETTINGS
from registry.codec import encode_instance
from registry.errors import NotServed, UnknownApplication
from registry.http import params
from registry.http.negotiation import cached_payload, payload, response_format
from registry.model import Lease


async def full_registry(request: web.Request) -> web.Response:
    """GET apps"""
    request.app[READS].check()
    registry = request.app[REGISTRY]
    fmt = response_format(request)
    return await cached_payload(
        request, (cache.APPS,), fmt, lambda: payloads.full_registry(registry, fmt)
    )


async def delta(request: web.Request) -> web.Response:
    """GET apps/delta"""
    request.app[READS].check()
    if request.app[SETTINGS].disable_delta:
        raise NotServed("deltas are disabled on this server; fetch apps/ instead")
    registry, journal, clock = request.app[REGISTRY], request.app[JOURNAL], request.app[CLOCK]
    if journal.purge(now_ms=clock.wall_ms()):  # cheap when nothing is due: retention is exact
        request.app[CACHE].drop_delta()
    fmt = response_format(request)
    return await cached_payload(
        request,
        (cache.DELTA,),
        fmt,
        lambda: payloads.delta(registry, journal, fmt, now_ms=clock.wall_ms()),
    )


async def application(request: web.Request) -> web.Response:
    """GET apps/{app}"""
    request.app[READS].check()
    name = params.app_name(request)
    registry = request.app[REGISTRY]
    if not registry.application(name):
        raise UnknownApplication(f"no instance of application {name!r} is registered")
    fmt = response_format(request)
    return await cached_payload(
        request, (cache.APP, name), fmt, lambda: payloads.application(registry, name, fmt)
    )


async def instance(request: web.Request) -> web.Response:
    """GET apps/{app}/{id}: hidden once its lease has expired."""
    lease = request.app[REGISTRY].get(
        params.app_name(request), request.match_info["id"], now_ms=request.app[CLOCK].wall_ms()
    )
    return _instance_payload(request, lease)


async def instance_by_id(request: web.Request) -> web.Response:
    """GET instances/{id}: the same, in whichever application holds the id."""
    lease = request.app[REGISTRY].find(
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
    request.app[READS].check()
    address = request.match_info["vip"]
    registry = request.app[REGISTRY]
    fmt = response_format(request)
    found: list[tuple[str, list[Lease]]] = []

    def build() -> bytes:
        found.extend(payloads.vip_matches(registry, address, secure=secure))
        return payloads.vip(found, fmt)

    # A VIP no instance has is answered but not kept, so names clients make up cannot fill
    # memory; the cache cannot tell them apart from real VIPs before building.
    return await cached_payload(
        request, (cache.VIP, secure, address), fmt, build, keep=lambda: bool(found)
    )
