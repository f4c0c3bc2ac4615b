"""JSON bodies in the legacy Jackson shape every Eureka client reads (contract 4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from registry.codec.wire import optional_texts
from registry.errors import BadInput
from registry.model import LeaseRecord

EMPTY_MAP = {"@class": "java.util.Collections$EmptyMap"}

Apps = Iterable[tuple[str, Iterable[LeaseRecord]]]


def decode(body: bytes) -> Any:
    """Parse a JSON body; BadInput when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadInput("body", f"cannot parse request body as JSON: {exc}") from None


def encode_instance(lease: LeaseRecord) -> bytes:
    return orjson.dumps({"instance": instance_dict(lease)})


def encode_application(name: str, leases: Iterable[LeaseRecord]) -> bytes:
    return orjson.dumps({"application": application_dict(name, leases)})


def encode_applications(apps: Apps, *, version: str, hashcode: str) -> bytes:
    return orjson.dumps(
        {
            "applications": {
                "versions__delta": version,
                "apps__hashcode": hashcode,
                "application": [application_dict(name, leases) for name, leases in apps],
            }
        }
    )


def application_dict(name: str, leases: Iterable[LeaseRecord]) -> dict[str, Any]:
    return {"name": name, "instance": [instance_dict(lease) for lease in leases]}


def instance_dict(lease: LeaseRecord) -> dict[str, Any]:
    """One instance, fields in the legacy serializer's order, nulls left out (contract 4.2)."""
    i = lease.instance
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
    d["leaseInfo"] = {
        "renewalIntervalInSecs": i.renewal_interval_secs,
        "durationInSecs": i.duration_secs,
        "registrationTimestamp": lease.registration_ms,
        "lastRenewalTimestamp": lease.last_renewal_ms,
        "evictionTimestamp": lease.eviction_ms,
        "serviceUpTimestamp": lease.service_up_ms,
    }
    d["metadata"] = dict(i.metadata) if i.metadata else EMPTY_MAP
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
