"""Query parameters and headers, parsed into typed values or refused with BadInput."""

from __future__ import annotations

from aiohttp import web

from registry.codec import wire
from registry.errors import BadInput
from registry.model import InstanceStatus

REPLICATION_HEADER = "x-netflix-discovery-replication"


def is_replication(request: web.Request) -> bool:
    return request.headers.get(REPLICATION_HEADER) == "true"


def app_name(request: web.Request) -> str:
    return request.match_info["app"].upper()


def last_dirty_ms(request: web.Request) -> int | None:
    raw = request.query.get("lastDirtyTimestamp")
    if raw is None or raw == "":
        return None
    return wire.timestamp(raw, "lastDirtyTimestamp")


def required_status(request: web.Request) -> InstanceStatus:
    status = optional_status(request)
    if status is None:
        raise BadInput("value", "the status to set is missing (?value=OUT_OF_SERVICE)")
    return status


def optional_status(request: web.Request) -> InstanceStatus | None:
    raw = request.query.get("value")
    if raw is None or raw == "":
        return None
    return wire.status(raw, "value", default=InstanceStatus.UNKNOWN)
