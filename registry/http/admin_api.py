"""What operators call: status overrides and metadata (contract 3.4-3.6, 3.16)."""

from __future__ import annotations

import orjson
from aiohttp import web

from registry.appkeys import CLOCK, REGISTRY, WRITER
from registry.codec import wire
from registry.errors import BadInput, StoreUnavailable
from registry.http import params
from registry.model import InstanceStatus


async def set_status_override(request: web.Request) -> web.Response:
    """PUT apps/{app}/{id}/status?value=OUT_OF_SERVICE"""
    status = params.required_status(request)
    request.app[REGISTRY].set_status_override(
        params.app_name(request),
        request.match_info["id"],
        status,
        now_ms=request.app[CLOCK].wall_ms(),
        last_dirty_ms=params.last_dirty_ms(params.query_string(request)),
        is_replication=params.is_replication(request),
    )
    await _committed(request)
    return web.Response()


async def delete_status_override(request: web.Request) -> web.Response:
    """DELETE apps/{app}/{id}/status[?value=UP]; without a value the status becomes UNKNOWN."""
    status = params.optional_status(request) or InstanceStatus.UNKNOWN
    request.app[REGISTRY].delete_status_override(
        params.app_name(request),
        request.match_info["id"],
        now_ms=request.app[CLOCK].wall_ms(),
        status=status,
        last_dirty_ms=params.last_dirty_ms(params.query_string(request)),
        is_replication=params.is_replication(request),
    )
    await _committed(request)
    return web.Response()


async def update_metadata(request: web.Request) -> web.Response:
    """PUT apps/{app}/{id}/metadata?key=value&...: merges every parameter into the metadata."""
    entries: dict[str, str] = {}
    for key in request.query:
        if not key:
            raise BadInput("metadata", "keys must not be empty")
        if key not in entries:  # the first value of a repeated key, as Eureka takes it
            value = request.query[key]
            wire.check_text(key, "metadata")
            wire.check_text(value, f"metadata.{key}")
            entries[key] = value
    request.app[REGISTRY].update_metadata(
        params.app_name(request),
        request.match_info["id"],
        entries,
        now_ms=request.app[CLOCK].wall_ms(),
    )
    return web.Response()


async def status_overrides(request: web.Request) -> web.Response:
    """GET /eureka/serverinfo/statusoverrides: every override in force, id -> status."""
    overrides = {iid: status.value for iid, status in request.app[REGISTRY].overrides().items()}
    return web.Response(body=orjson.dumps(overrides), content_type="application/json")


async def _committed(request: web.Request) -> None:
    """An admin's decision is on disk before it is acknowledged (when the store is on)."""
    writer = request.app[WRITER]
    if writer is None:
        return
    try:
        await writer.flush()
    except Exception as exc:
        raise StoreUnavailable(
            "the override is in force on this node (and sent to its peers) but could not be "
            f"written to disk ({type(exc).__name__}: {exc}); it is written when the store "
            "recovers, and lost if this node stops before then"
        ) from None
