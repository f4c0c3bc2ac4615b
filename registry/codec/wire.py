"""Read an instance from its wire form: the dict the JSON body, or the XML turned into the
same shape, carries. Lenient in what it accepts, precise in what it refuses (contract 15).

Accepted: timestamps as strings or numbers, ports as bare numbers or `{"$", "@enabled"}`
objects, `@enabled` as bool or string, a missing `@class`, both `overriddenStatus` spellings,
no `instanceId` (the id falls back as in contract 3.1), explicit nulls (skipped).
Refused with a BadInput naming the field: missing required fields, wrong types, unknown
statuses, strings that could not be written back as XML, ids that cannot appear in a URL path.
"""

from __future__ import annotations

import base64
import functools
import re
import sys
from collections.abc import Mapping
from typing import Any, TypeGuard

from multidict import istr

from registry.core.model import (
    AMAZON_CLASS,
    DEFAULT_DATA_CENTER_CLASS,
    DataCenterInfo,
    InstanceInfo,
    InstanceStatus,
    LeaseRecord,
    PortInfo,
    check_metadata_size,
)
from registry.errors import BadInput, digits, shown

# Marks a call as replication from a peer. An istr spares the case-insensitive header lookup
# from folding the name on every request.
REPLICATION_HEADER = istr("x-netflix-discovery-replication")


def basic_authorization(credential: str) -> str:
    """The `Authorization` header value that presents `user:password` as HTTP Basic."""
    return "Basic " + base64.b64encode(credential.encode()).decode()


# Ours: the registry index a response was made at, for long-polls and watches to resume from,
# and the epoch that index belongs to (this node, this run).
INDEX_HEADER = istr("X-Registry-Index")
EPOCH_HEADER = istr("X-Registry-Epoch")
# On a peer's batch and digest answers: whether it runs server-side checks ("on", "off"): the
# nodes share the checks out over those that do (registry/checks/owner.py).
CHECKS_HEADER = istr("X-Registry-Checks")
SINCE_HEADER = istr("X-Registry-Since")  # on a long-poll answer: the index it goes on from
# On a registration's 204 that changed nothing (ours is newer): why.
REGISTRATION_HEADER = istr("X-Registry-Registration")
# Sent by our nodes with their replication calls: the batch answer may carry fields of ours
# (an error's name and detail, a removal), which stock Eureka peers cannot read.
PEER_HEADER = istr("X-Registry-Peer")
# Our nodes' User-Agent on replication calls; releases before X-Registry-Peer send it alone.
REPLICATION_USER_AGENT = "service-registry-replication"
# On a heartbeat's 404, which has no body (as Eureka's): which error it is.
ERROR_HEADER = istr("X-Registry-Error")
DATA_CENTER_NAMES = ("Netflix", "Amazon", "MyOwn")
DATA_CENTER_CLASSES = (
    DEFAULT_DATA_CENTER_CLASS,
    AMAZON_CLASS,
    "com.netflix.appinfo.MyDataCenterInfo",
)
DEFAULT_RENEWAL_INTERVAL_SECS = 30
DEFAULT_DURATION_SECS = 90
# A lease's interval and duration, as a client asks, are whole seconds from 1 (so no lease is
# expected to renew more than 60 times a minute: self-preservation weighs each by its interval)
# to an hour (so an instance that stops heartbeating is listed an hour at most: a lease of 68
# years was served, UP, for good). Zero or less means the default; more than an hour, an hour.
MAX_LEASE_SECS = 3600

# Characters XML 1.0 cannot carry at all; accepting them would make our XML output invalid.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_MAX_TEXT = 4096
_VISIBLE = re.compile("[!-.0-~]+")  # ASCII from ! to ~, without /
_SHARED_MAX = 64
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1


def instance_from_wire(
    data: object, *, now_ms: int, expected_app: str | None = None
) -> InstanceInfo:
    """The InstanceInfo a register body describes; BadInput for anything wrong with it.

    Checks run in Eureka's order (contract 3.1), so the first complaint is the one it would make.
    """
    d = _object(data, "instance")
    host_name = text(d, "hostName")
    app = text(d, "app")
    data_center = _data_center(d.get("dataCenterInfo"))
    metadata = _metadata(d.get("metadata"), "metadata")
    instance_id = _instance_id(d, host_name, data_center, metadata)
    if not instance_id:
        raise BadInput("instanceId", "Missing instanceId")
    if not host_name:
        raise BadInput("hostName", "Missing hostname")
    ip_addr = text(d, "ipAddr")
    if not ip_addr:
        raise BadInput("ipAddr", "Missing ip address")
    if ip_addr == host_name:  # Spring's preferIpAddress: one string for both, 57 B less
        ip_addr = host_name
    if not app:
        raise BadInput("app", "Missing appName")
    app = _shared(app.upper())
    if expected_app is not None and app != expected_app:
        raise BadInput("app", f"Mismatched appName, expecting {expected_app} but was {app}")
    if data_center is None:
        raise BadInput("dataCenterInfo", "Missing dataCenterInfo")
    check_path_segment(instance_id, "instanceId")
    check_path_segment(app, "app")
    if data_center.name == "Amazon" and "instance-id" not in data_center.metadata:
        data_center = DataCenterInfo(
            name=data_center.name,
            class_name=data_center.class_name,
            metadata={**data_center.metadata, "instance-id": instance_id},
        )
    raw_lease_info = d.get("leaseInfo")
    lease_info = {} if raw_lease_info is None else _object(raw_lease_info, "leaseInfo")
    overridden_key = (
        "overriddenStatus" if d.get("overriddenStatus") is not None else "overriddenstatus"
    )
    app_group = text(d, "appGroupName")
    return InstanceInfo(
        instance_id=instance_id,
        app=app,
        host_name=host_name,
        ip_addr=ip_addr,
        data_center_info=data_center,
        status=status(d.get("status"), "status", default=InstanceStatus.UP),
        overridden_status=status(
            d.get(overridden_key), overridden_key, default=InstanceStatus.UNKNOWN
        ),
        port=_port(d.get("port"), "port", default=_port_info(7001, True)),
        secure_port=_port(d.get("securePort"), "securePort", default=_port_info(7002, False)),
        renewal_interval_secs=_lease_secs(
            integer(lease_info.get("renewalIntervalInSecs"), "leaseInfo.renewalIntervalInSecs"),
            DEFAULT_RENEWAL_INTERVAL_SECS,
        ),
        duration_secs=_lease_secs(
            integer(lease_info.get("durationInSecs"), "leaseInfo.durationInSecs"),
            DEFAULT_DURATION_SECS,
        ),
        metadata=metadata,
        sid=_shared_text(d, "sid") or "na",
        country_id=_or(integer(d.get("countryId"), "countryId"), 1),
        app_group_name=_shared(app_group.upper()) if app_group else None,
        home_page_url=text(d, "homePageUrl"),
        status_page_url=text(d, "statusPageUrl"),
        health_check_url=text(d, "healthCheckUrl"),
        secure_health_check_url=text(d, "secureHealthCheckUrl"),
        vip_address=_shared_text(d, "vipAddress"),
        secure_vip_address=_shared_text(d, "secureVipAddress"),
        last_updated_ms=_or(
            timestamp(d.get("lastUpdatedTimestamp"), "lastUpdatedTimestamp"), now_ms
        ),
        last_dirty_ms=_or(timestamp(d.get("lastDirtyTimestamp"), "lastDirtyTimestamp"), now_ms),
        asg_name=text(d, "asgName"),
    )


def optional_texts(i: InstanceInfo) -> tuple[tuple[str, str | None], ...]:
    """The optional string fields in the order both encoders write them (contract 4.2)."""
    return (
        ("appGroupName", i.app_group_name),
        ("homePageUrl", i.home_page_url),
        ("statusPageUrl", i.status_page_url),
        ("healthCheckUrl", i.health_check_url),
        ("secureHealthCheckUrl", i.secure_health_check_url),
        ("vipAddress", i.vip_address),
        ("secureVipAddress", i.secure_vip_address),
    )


def lease_numbers(lease: LeaseRecord) -> tuple[int, int, int, int, int, int]:
    """The numbers of `leaseInfo` in the order both encoders write them (contract 4.2)."""
    i = lease.instance
    return (
        i.renewal_interval_secs,
        i.duration_secs,
        lease.registration_ms,
        lease.last_renewal_ms,
        lease.eviction_ms,
        lease.service_up_ms,
    )


def _clean(value: object) -> TypeGuard[str]:
    """A string to take as it is, checked at once: the usual case, and a registration reads
    twenty of them."""
    return type(value) is str and len(value) <= _MAX_TEXT and not _NOT_XML.search(value)


def text(d: Mapping[str, Any], key: str, field: str | None = None) -> str | None:
    """A string field; numbers and booleans are taken as their text, null as absent."""
    value = d.get(key)
    if _clean(value):
        return value  # the usual case
    if value is None:
        return None
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, int | float):
        value = str(value)
    elif not isinstance(value, str):
        raise BadInput(field or key, f"must be a string, not {_kind(value)}")
    check_text(value, field or key)
    return value


def check_text(value: str, field: str) -> None:
    if len(value) > _MAX_TEXT:
        raise BadInput(field, f"longer than {_MAX_TEXT} characters")
    if _NOT_XML.search(value):
        raise BadInput(field, "contains a control character")


def check_path_segment(value: str, field: str) -> None:
    """Ids and app names travel in URL paths and are shown to people: visible ASCII only
    (`!` to `~`), no `/`, and not `.` or `..`. Controls, spaces, zero-width and
    direction-changing characters, and letters that look like others (a Cyrillic a) made
    rows that pass for other rows on the status page and in logs."""
    if not _VISIBLE.fullmatch(value) or value in (".", ".."):
        raise BadInput(
            field,
            f"{_short(value)} is not an id: visible ASCII characters only (no spaces, "
            "controls or '/'), as a URL path carries them",
        )


def integer(value: object, field: str, *, maximum: int = JAVA_INT_MAX) -> int | None:
    """A whole number up to `maximum`, as a JSON number or decimal text; null as absent.

    The bounds are Java's: a number a Java client cannot hold would break its every fetch.
    """
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, bool):
        raise BadInput(field, "must be a number, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and len(value) < 40:
        text = value.strip()
        # One sign at most, as int() reads: "-+5" is no number.
        if digits(text[1:] if text.startswith(("-", "+")) else text):
            number = int(text)
    if number is None:
        raise BadInput(field, f"must be a whole number, not {_short(value)}")
    if not -maximum - 1 <= number <= maximum:
        raise BadInput(field, f"{shown(number)} is out of range (at most {maximum})")
    return number


def timestamp(value: object, field: str) -> int | None:
    """Epoch milliseconds: a non-negative Java long."""
    ms = integer(value, field, maximum=JAVA_LONG_MAX)
    if ms is not None and ms < 0:
        raise BadInput(field, "must not be negative")
    return ms


def not_ahead(ms: int | None, field: str, *, now_ms: int, skew_ms: int) -> int | None:
    """`ms`, unless it is further ahead of `now_ms` than `skew_ms`: a time no clock has
    reached would win every later conflict, pinning a record against its real owner."""
    if ms is not None and ms - now_ms > skew_ms:
        raise BadInput(
            field,
            f"is {(ms - now_ms) / 1000:.0f} s ahead of this node's clock "
            f"(leases.max_clock_skew allows {skew_ms / 1000:g} s)",
        )
    return ms


def status(value: object, field: str, *, default: InstanceStatus) -> InstanceStatus:
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise BadInput(field, f"must be a status name, not {_kind(value)}")
    try:
        return InstanceStatus.parse(value)
    except ValueError as exc:
        raise BadInput(field, str(exc)) from None


def boolean(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadInput(field, f"must be true or false, not {shown(value)}")


def _port(value: object, field: str, *, default: PortInfo) -> PortInfo:
    if value is None:
        return default
    enabled = default.enabled
    if isinstance(value, Mapping):
        number_field = f"{field}.$"
        number = integer(value.get("$"), number_field)
        if value.get("@enabled") is not None:
            enabled = boolean(value["@enabled"], f"{field}.@enabled")
    else:
        number_field = field
        number = integer(value, field)
    if number is None:
        return _port_info(default.number, enabled)
    if not 0 <= number <= 65535:
        raise BadInput(number_field, f"{number} is not a port number")
    return _port_info(number, enabled)


def _data_center(value: object) -> DataCenterInfo | None:
    if value is None:
        return None
    d = _object(value, "dataCenterInfo")
    name = text(d, "name", "dataCenterInfo.name")
    if not name:
        raise BadInput("dataCenterInfo.name", "Missing dataCenterInfo Name")
    if name not in DATA_CENTER_NAMES:
        raise BadInput(
            "dataCenterInfo.name", f"{name!r} is not one of {', '.join(DATA_CENTER_NAMES)}"
        )
    class_name = text(d, "@class", "dataCenterInfo.@class") or (
        AMAZON_CLASS if name == "Amazon" else DEFAULT_DATA_CENTER_CLASS
    )
    if class_name not in DATA_CENTER_CLASSES:
        # Java clients resolve this class by name: an unknown one would fail their every fetch.
        raise BadInput(
            "dataCenterInfo.@class",
            f"{class_name!r} is not one of {', '.join(DATA_CENTER_CLASSES)}",
        )
    if name == "Amazon":
        metadata = _metadata(d.get("metadata"), "dataCenterInfo.metadata")
        return DataCenterInfo(name=name, class_name=class_name, metadata=metadata)
    return _plain_data_center(name, class_name)


def _metadata(value: object, field: str) -> dict[str, str]:
    """A string map; Java's `@class` markers are dropped, null values skipped; at most
    MAX_METADATA_ENTRIES entries of MAX_METADATA_CHARS characters in all (keys and values)."""
    if value is None:
        return {}
    d = _object(value, field)
    check_metadata_size(d, field)
    result: dict[str, str] = {}
    for key in d:
        if key == "@class":
            continue
        if not key:
            raise BadInput(field, "keys must not be empty")
        check_text(key, field)
        item = d[key]
        if _clean(item):
            item_text: str | None = item
        else:
            item_text = text(d, key, f"{field}.{key}")  # converted, or refused with its name
        if item_text is not None:
            result[_shared(key)] = _shared(item_text)
    return result


def _instance_id(
    d: Mapping[str, Any],
    host_name: str | None,
    data_center: DataCenterInfo | None,
    metadata: Mapping[str, str],
) -> str | None:
    explicit = text(d, "instanceId")
    if explicit:
        return explicit
    spring_id = metadata.get("instanceId")
    if spring_id and host_name:
        # Spring Cloud's convention for clients that leave instanceId out.
        return spring_id if spring_id.startswith(host_name) else f"{host_name}:{spring_id}"
    if data_center is not None and data_center.name == "Amazon":
        aws_id = data_center.metadata.get("instance-id")
        if aws_id:
            return aws_id
    return host_name


def _object(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadInput(field, f"must be an object, not {_kind(value)}")
    return value


# Memory: a registry holds many instances that repeat the same few values (app, VIP, ports,
# data center, metadata keys such as management.port = 8080). They share one object each.


def _shared(value: str) -> str:
    """One copy of a short, often repeated string."""
    return sys.intern(value) if len(value) <= _SHARED_MAX else value


def _shared_text(d: Mapping[str, Any], key: str) -> str | None:
    value = text(d, key)
    return None if value is None else _shared(value)


@functools.cache
def _port_info(number: int, enabled: bool) -> PortInfo:
    return PortInfo(number, enabled)


@functools.cache
def _plain_data_center(name: str, class_name: str) -> DataCenterInfo:
    return DataCenterInfo(name=name, class_name=class_name)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _lease_secs(value: int | None, default: int) -> int:
    return min(value, MAX_LEASE_SECS) if value is not None and value > 0 else default


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
