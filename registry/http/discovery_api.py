"""What discovery clients read: the registry, its delta, one app, one instance, VIPs (3.7-3.12).

Each handler takes what it needs from the registry synchronously, so a payload and its
`apps__hashcode` always describe the same state.
"""

from __future__ import annotations

from aiohttp import web

from registry.appkeys import CLOCK, JOURNAL, REGISTRY, SETTINGS
from registry.codec import encode_application, encode_applications, encode_instance
from registry.errors import NotServed, UnknownApplication
from registry.hashcode import reconcile_hash
from registry.http import params
from registry.http.negotiation import payload, response_format
from registry.model import Lease

# A full fetch always says "1": clients treat "-1" as "never fetch deltas" (contract 9.3).
FULL_FETCH_VERSION = "1"
VIP_VERSION = "-1"


async def full_registry(request: web.Request) -> web.Response:
    """GET apps: every application with all its instances, expired-but-not-evicted included."""
    registry = request.app[REGISTRY]
    fmt = response_format(request)
    body = encode_applications(
        fmt,
        registry.applications(),
        version=FULL_FETCH_VERSION,
        hashcode=registry.reconcile_hash(),
    )
    return payload(request, fmt, body)


async def delta(request: web.Request) -> web.Response:
    """GET apps/delta: recent changes, with the hash of the whole registry to check them by.

    `versions__delta` is the registry index the delta was taken at.
    """
    if request.app[SETTINGS].disable_delta:
        raise NotServed("deltas are disabled on this server; fetch apps/ instead")
    registry = request.app[REGISTRY]
    changes = request.app[JOURNAL].recent(now_ms=request.app[CLOCK].wall_ms())
    fmt = response_format(request)
    body = encode_applications(
        fmt, changes, version=str(registry.index), hashcode=registry.reconcile_hash()
    )
    return payload(request, fmt, body)


async def application(request: web.Request) -> web.Response:
    """GET apps/{app}"""
    name = params.app_name(request)
    leases = request.app[REGISTRY].application(name)
    if not leases:
        raise UnknownApplication(f"no instance of application {name!r} is registered")
    fmt = response_format(request)
    return payload(request, fmt, encode_application(fmt, name, leases))


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
    return _vip_payload(request, secure=False)


async def secure_vip(request: web.Request) -> web.Response:
    """GET svips/{svip}: the same for secureVipAddress."""
    return _vip_payload(request, secure=True)


def _instance_payload(request: web.Request, lease: Lease) -> web.Response:
    fmt = response_format(request)
    return payload(request, fmt, encode_instance(fmt, lease))


def _vip_payload(request: web.Request, *, secure: bool) -> web.Response:
    wanted = request.match_info["vip"]
    matches: list[tuple[str, list[Lease]]] = []
    for name, leases in request.app[REGISTRY].applications():
        chosen = [lease for lease in leases if wanted in _vips(lease, secure)]
        if chosen:
            matches.append((name, chosen))
    fmt = response_format(request)
    statuses = (lease.instance.status for _, chosen in matches for lease in chosen)
    body = encode_applications(fmt, matches, version=VIP_VERSION, hashcode=reconcile_hash(statuses))
    return payload(request, fmt, body)


def _vips(lease: Lease, secure: bool) -> list[str]:
    address = lease.instance.secure_vip_address if secure else lease.instance.vip_address
    return address.split(",") if address else []
