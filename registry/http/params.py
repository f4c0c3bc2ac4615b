"""Query parameters and headers, parsed into typed values or refused with BadInput."""

from __future__ import annotations

import re
from datetime import datetime
from urllib.parse import unquote_plus

from aiohttp import web

from registry.appkeys import SETTINGS
from registry.codec import wire
from registry.codec.wire import REPLICATION_HEADER
from registry.core.model import InstanceStatus
from registry.core.overrides import MAX_EXPIRY_MS, MAX_REASON
from registry.errors import BadInput, digits, shown
from registry.reads.interest import MAX_NAMES, Interest

_LAST_DIRTY = "lastDirtyTimestamp="
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,3})?)(ms|s|m)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}
_EXPIRY = re.compile(r"(\d{1,7}(?:\.\d{1,3})?)(s|m|h|d)")
_EXPIRY_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def is_replication(request: web.Request) -> bool:
    return request.headers.get(REPLICATION_HEADER) == "true"


def app_name(request: web.Request) -> str:
    return request.match_info["app"].upper()


def query_string(request: web.Request) -> str:
    """The raw query string: cheaper than building `request.query` for one or two values."""
    return request.raw_path.partition("?")[2].partition("#")[0]


def query_value(query: str, name: str) -> str | None:
    """The first value of one parameter of a raw query string, decoded; a percent escape
    that is no UTF-8 (`%FF`) is refused, as metadata's are, rather than kept as U+FFFD."""
    key = name + "="
    start = query.find(key)
    while start > 0 and query[start - 1] != "&":  # inside another parameter: look further
        start = query.find(key, start + 1)
    if start < 0:
        return None
    start += len(key)
    end = query.find("&", start)
    value = query[start:] if end < 0 else query[start:end]
    if "%" not in value and "+" not in value:
        return value
    try:
        return unquote_plus(value, errors="strict")
    except UnicodeDecodeError:
        raise BadInput(name, "its percent escapes are not UTF-8") from None


MAX_ZONE = 256  # characters of a zone's name in `?zone=`


def zone(request: web.Request) -> str | None:
    """`?zone=`: the zone a read is limited to (core/zones.py), None for every zone."""
    value = query_value(query_string(request), "zone")
    if value is None:
        return None
    if not value or len(value) > MAX_ZONE:
        raise BadInput("zone", f"must name a zone ({MAX_ZONE} characters at most)")
    wire.check_text(value, "zone")
    return value


def interest(request: web.Request) -> Interest | None:
    """`?apps=A,B` and `?vips=v1,v2`: what a watch stream is limited to; None for all."""
    query = query_string(request)
    apps, vips = query_value(query, "apps"), query_value(query, "vips")
    if apps is None and vips is None:
        return None
    names = {"apps": _names(apps, "apps"), "vips": _names(vips, "vips")}
    if len(names["apps"]) + len(names["vips"]) > MAX_NAMES:
        raise BadInput("apps", f"a stream names {MAX_NAMES} applications and VIPs at most")
    return Interest(frozenset(a.upper() for a in names["apps"]), frozenset(names["vips"]))


def _names(value: str | None, field: str) -> list[str]:
    if value is None:
        return []
    names = value.split(",")
    for name in names:
        wire.check_path_segment(name, field)
    return names


def skew_ms(request: web.Request) -> int:
    """How far ahead of this node's clock a client's lastDirtyTimestamp may be."""
    return int(request.app[SETTINGS].leases.max_clock_skew * 1000)


def checked_dirty_ms(request: web.Request, query: str, *, now_ms: int) -> int | None:
    """`last_dirty_ms` of `query`, refused when it is further ahead than `skew_ms` allows."""
    return wire.not_ahead(
        last_dirty_ms(query), _LAST_DIRTY[:-1], now_ms=now_ms, skew_ms=skew_ms(request)
    )


def last_dirty_ms(query: str) -> int | None:
    """lastDirtyTimestamp of a raw query string, which every heartbeat carries.

    Clients send it last and as plain digits; that form is read with a few string calls (a
    regular expression costs more here), every other form by the general reader.
    """
    start = query.find(_LAST_DIRTY)
    if start < 0:
        return None
    if start == 0 or query[start - 1] == "&":
        raw = query[start + len(_LAST_DIRTY) :]
        if digits(raw) and len(raw) < 19:  # what int() reads, within a Java long
            return int(raw)
    value = query_value(query, "lastDirtyTimestamp")
    return None if value is None or value == "" else wire.timestamp(value, "lastDirtyTimestamp")


def required_status(request: web.Request) -> InstanceStatus:
    """The status an override sets: never UNKNOWN (what a name Eureka does not know reads as),
    which peers refuse and which answers the instance's every heartbeat 404."""
    status = optional_status(request)
    if status is None:
        raise BadInput("value", "the status to set is missing (?value=OUT_OF_SERVICE)")
    if status is InstanceStatus.UNKNOWN:
        raise BadInput(
            "value",
            "UNKNOWN (or a status Eureka does not know) is no override: set UP, DOWN, STARTING "
            "or OUT_OF_SERVICE, or DELETE the override",
        )
    return status


def optional_status(request: web.Request) -> InstanceStatus | None:
    """`?value=`: None when the parameter is left out; an empty one names no status, and is
    refused rather than read as left out (a DELETE would then drop the override)."""
    raw = query_value(query_string(request), "value")
    if raw is None:
        return None
    if raw == "":
        raise BadInput("value", "is empty: name a status, or leave the parameter out")
    return wire.status(raw, "value", default=InstanceStatus.UNKNOWN)


def registry_index(raw: str | None, field: str) -> int | None:
    """A registry index (from `?index=` or `Last-Event-ID`), None when not given."""
    if raw is None or raw == "":
        return None
    if not digits(raw) or len(raw) > 18:
        raise BadInput(field, f"{shown(raw)} is not a registry index (a non-negative integer)")
    return int(raw)


def event_id(raw: str | None, field: str) -> tuple[int | None, str | None]:
    """A watch stream's event id, `index@epoch` or a bare index: (index, epoch or None)."""
    index, _, epoch = (raw or "").partition("@")
    return registry_index(index, field), epoch or None


def since_ms(query: str) -> int | None:
    """`?since=`: epoch milliseconds."""
    raw = query_value(query, "since")
    if raw is None or raw == "":
        return None
    if not digits(raw) or len(raw) > 15:
        raise BadInput("since", f"{shown(raw)} is not a time in epoch milliseconds")
    return int(raw)


def reason(query: str) -> str | None:
    """`?reason=` of an override: why, in the admin's words."""
    raw = query_value(query, "reason")
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_REASON:
        raise BadInput("reason", f"is {len(raw)} characters; at most {MAX_REASON}")
    wire.check_text(raw, "reason")
    return raw


def expires_ms(query: str, *, now_ms: int) -> int | None:
    """`?expires=` of an override: a duration from now (`90s`, `30m`, `8h`, `7d`) or an
    ISO 8601 time with its offset (`2026-11-23T08:00:00Z`), at most a year away; as epoch
    milliseconds."""
    raw = query_value(query, "expires")
    if raw is None or raw == "":
        return None
    match = _EXPIRY.fullmatch(raw.strip())
    if match is not None:
        when = now_ms + int(float(match[1]) * _EXPIRY_UNITS[match[2]] * 1000)
    else:
        try:
            moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(
                "expires", f"{shown(raw)} is neither a duration (30m, 8h, 7d) nor an ISO 8601 time"
            ) from None
        if moment.tzinfo is None:
            raise BadInput("expires", f"{shown(raw)} has no UTC offset (add Z or +01:00)")
        when = int(moment.timestamp() * 1000)
    if when <= now_ms:
        raise BadInput("expires", f"{shown(raw)} is not in the future")
    if when - now_ms > MAX_EXPIRY_MS:
        raise BadInput("expires", f"{shown(raw)} is more than a year away (omit it: no expiry)")
    return when


def wait_seconds(query: str) -> float | None:
    """`?wait=` as seconds: 30s, 500ms, 2m, or a bare number of seconds."""
    raw = query_value(query, "wait")
    if raw is None:
        return None
    match = _DURATION.fullmatch(raw.strip())
    if match is None:
        raise BadInput("wait", f"{shown(raw)} is not a duration such as 30s, 500ms or 2m")
    return float(match[1]) * _UNIT_SECONDS[match[2]]
