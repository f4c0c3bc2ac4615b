"""JSON bodies in the legacy Jackson shape every Eureka client reads (contract 4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from registry.codec.wire import lease_numbers, optional_texts
from registry.core.model import InstanceInfo, LeaseRecord
from registry.errors import BadInput

EMPTY_MAP = {"@class": "java.util.Collections$EmptyMap"}


def decode(body: bytes) -> Any:
    """Parse a JSON body; BadInput when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadInput("body", f"cannot parse request body as JSON: {exc}") from None


def encode_instance(lease: LeaseRecord) -> bytes:
    return b'{"instance":' + instance_item(lease) + b"}"


# A document is assembled from pieces encoded once each: the applications' head (version and
# hashcode), application blocks, each a name and instance items, and the tail. The pieces
# join into exactly what orjson writes for the whole document as one dict.
SEPARATOR = b","
APPLICATIONS_TAIL = b"]}}"
APPLICATION_HEAD = b'{"application":'  # around an application's block, for GET apps/{app}
APPLICATION_TAIL = b"}"


def instance_item(lease: LeaseRecord) -> bytes:
    """One instance as an element of an application's `instance` list."""
    head, tail = instance_parts(lease.instance)
    return head + lease_part(lease) + tail


def instance_parts(i: InstanceInfo) -> tuple[bytes, bytes]:
    """The item around its `leaseInfo`: what changes only when the instance does, so a lease's
    renewals cost `lease_part` alone. The same bytes as `instance_dict` encoded whole."""
    head, tail = orjson.dumps(_head(i)), orjson.dumps(_tail(i))
    # Slicing also copies them to buffers of their own size: what orjson returns keeps about
    # 8 KB of memory behind it (measured: 8 160 B per 840-byte item), and these are kept by
    # the hundred thousand.
    return head[:-1] + b',"leaseInfo":', b"," + tail[1:]


def lease_part(lease: LeaseRecord) -> bytes:
    return _LEASE % lease_numbers(lease)


_LEASE = (
    b'{"renewalIntervalInSecs":%d,"durationInSecs":%d,"registrationTimestamp":%d,'
    b'"lastRenewalTimestamp":%d,"evictionTimestamp":%d,"serviceUpTimestamp":%d}'
)


def applications_head(*, version: str, hashcode: str) -> bytes:
    return (
        b'{"applications":{"versions__delta":'
        + orjson.dumps(version)
        + b',"apps__hashcode":'
        + orjson.dumps(hashcode)
        + b',"application":['
    )


def application_block(name: str, items: Iterable[bytes]) -> bytes:
    """One application of an `application` list, from its encoded instance items."""
    return b'{"name":' + orjson.dumps(name) + b',"instance":[' + b",".join(items) + b"]}"


def instance_dict(lease: LeaseRecord) -> dict[str, Any]:
    """One instance, fields in the legacy serializer's order, nulls left out (contract 4.2)."""
    i = lease.instance
    return {**_head(i), "leaseInfo": lease_dict(lease), **_tail(i)}


def lease_dict(lease: LeaseRecord) -> dict[str, int]:
    i = lease.instance
    return {
        "renewalIntervalInSecs": i.renewal_interval_secs,
        "durationInSecs": i.duration_secs,
        "registrationTimestamp": lease.registration_ms,
        "lastRenewalTimestamp": lease.last_renewal_ms,
        "evictionTimestamp": lease.eviction_ms,
        "serviceUpTimestamp": lease.service_up_ms,
    }


def _head(i: InstanceInfo) -> dict[str, Any]:
    """The fields before `leaseInfo`."""
    d: dict[str, Any] = {
        "instanceId": i.instance_id,
        "hostName": i.host_name,
        "app": i.app,
        "ipAddr": i.ip_addr,
    }
    if i.sid not in ("na", "unknown"):
        d["sid"] = i.sid
    d["status"] = i.status.value
    d["overriddenStatus"] = i.overridden_status.value
    d["port"] = {"$": i.port.number, "@enabled": "true" if i.port.enabled else "false"}
    d["securePort"] = {
        "$": i.secure_port.number,
        "@enabled": "true" if i.secure_port.enabled else "false",
    }
    d["countryId"] = i.country_id
    dc = i.data_center_info
    d["dataCenterInfo"] = {"@class": dc.class_name, "name": dc.name}
    if dc.metadata:
        d["dataCenterInfo"]["metadata"] = dict(dc.metadata)
    return d


def _tail(i: InstanceInfo) -> dict[str, Any]:
    """The fields after `leaseInfo`."""
    d: dict[str, Any] = {"metadata": dict(i.metadata) if i.metadata else EMPTY_MAP}
    for key, value in optional_texts(i):
        if value is not None:
            d[key] = value
    # This server never registers itself, so no record is the coordinating server's own.
    d["isCoordinatingDiscoveryServer"] = "false"
    d["lastUpdatedTimestamp"] = str(i.last_updated_ms)
    d["lastDirtyTimestamp"] = str(i.last_dirty_ms)
    if i.action_type is not None:
        d["actionType"] = i.action_type.value
    if i.asg_name is not None:
        d["asgName"] = i.asg_name
    return d
