"""What discovery clients read: the registry, its delta, one app, one instance, VIPs (3.7-3.12).

Each handler takes what it needs from the registry synchronously, so a payload and its
`apps__hashcode` always describe the same state.
"""

from __future__ import annotations

from aiohttp import web

from registry import cache
from registry.appkeys import CACHE, CLOCK, JOURNAL, REGISTRY, SETTINGS
from registry.codec import encode_application, encode_applications, encode_instance
from registry.errors import NotServed, UnknownApplication
from registry.hashcode import reconcile_hash
from registry.http import params
from registry.http.negotiation import cached_payload, payload, response_format
from registry.model import Lease

# A full fetch always says "1": clients treat "-1" as "never fetch deltas" (contract 9.3).
FULL_FETCH_VERSION = "1"
VIP_VERSION = "-1"


async def full_registry(request: web.Request) -> web.Response:
    """GET apps: every application with all its instances, expired-but-not-evicted included."""
    registry = request.app[REGISTRY]
    fmt = response_format(request)

    def build() -> bytes:
        return encode_applications(
            fmt,
            registry.applications(),
            version=FULL_FETCH_VERSION,
            hashcode=registry.reconcile_hash(),
        )

    return await cached_payload(request, (cache.APPS,), fmt, build)


async def delta(request: web.Request) -> web.Response:
    """GET apps/delta: recent changes, with the hash of the whole registry to check them by.

    `versions__delta` is the registry index the delta was taken at.
    """
    if request.app[SETTINGS].disable_delta:
        raise NotServed("deltas are disabled on this server; fetch apps/ instead")
    registry, journal, clock = request.app[REGISTRY], request.app[JOURNAL], request.app[CLOCK]
    if journal.purge(now_ms=clock.wall_ms()):  # cheap when nothing is due: retention is exact
        request.app[CACHE].drop_delta()
    fmt = response_format(request)

    def build() -> bytes:
        return encode_applications(
            fmt,
            journal.recent(now_ms=clock.wall_ms()),
            version=str(registry.index),
            hashcode=registry.reconcile_hash(),
        )

    return await cached_payload(request, (cache.DELTA,), fmt, build)


async def application(request: web.Request) -> web.Response:
    """GET apps/{app}"""
    name = params.app_name(request)
    leases = request.app[REGISTRY].application(name)
    if not leases:
        raise UnknownApplication(f"no instance of application {name!r} is registered")
    fmt = response_format(request)
    return await cached_payload(
        request, (cache.APP, name), fmt, lambda: encode_application(fmt, name, leases)
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
    """GET vips/{vip}: instances whose comma-separated vipAddress names it exactly."""
    return await _vip_payload(request, secure=False)


async def secure_vip(request: web.Request) -> web.Response:
    """GET svips/{svip}: the same for secureVipAddress."""
    return await _vip_payload(request, secure=True)


def _instance_payload(request: web.Request, lease: Lease) -> web.Response:
    fmt = response_format(request)
    return payload(request, fmt, encode_instance(fmt, lease))


async def _vip_payload(request: web.Request, *, secure: bool) -> web.Response:
    wanted = request.match_info["vip"]
    registry = request.app[REGISTRY]
    fmt = response_format(request)

    def build() -> bytes:
        matches: list[tuple[str, list[Lease]]] = []
        for name, leases in registry.applications():
            chosen = [lease for lease in leases if wanted in _vips(lease, secure)]
            if chosen:
                matches.append((name, chosen))
        statuses = (lease.instance.status for _, chosen in matches for lease in chosen)
        hashcode = reconcile_hash(statuses)
        return encode_applications(fmt, matches, version=VIP_VERSION, hashcode=hashcode)

    return await cached_payload(request, (cache.VIP, secure, wanted), fmt, build)


def _vips(lease: Lease, secure: bool) -> list[str]:
    address = lease.instance.secure_vip_address if secure else lease.instance.vip_address
    return address.split(",") if address else []
