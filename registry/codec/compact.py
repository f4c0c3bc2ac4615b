"""Eureka's compact forms, for a client that asks with `X-Eureka-Accept: compact` (Netflix's
client with its "mini" codecs): each instance without what routing does not read, as
Eureka's server leaves it out (its MiniInstanceInfoMixIn): no overriddenStatus, sid,
countryId, appGroupName, home, status or health-check URLs, isCoordinatingDiscoveryServer,
lastDirtyTimestamp, leaseInfo or metadata; an Amazon data center's metadata cut to
instance-id, public-ipv4, public-hostname, local-ipv4 and availability-zone. What is left:
instanceId, hostName, app, ipAddr, status, port, securePort, dataCenterInfo, vipAddress,
secureVipAddress, lastUpdatedTimestamp, actionType and asgName. Documents are put together
from the same pieces as the full forms (a compact item has no lease part, so renewals never
make it stale).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from registry.codec import json_codec, xml_codec
from registry.codec.shape import Shape
from registry.core.model import InstanceInfo, LeaseRecord

AMAZON_KEYS = ("instance-id", "public-ipv4", "public-hostname", "local-ipv4", "availability-zone")


def _amazon(metadata: Mapping[str, str]) -> dict[str, str]:
    return {key: metadata[key] for key in AMAZON_KEYS if key in metadata}


def instance_dict(i: InstanceInfo) -> dict[str, Any]:
    """One instance in the compact JSON form (the fields, in order, that Eureka's has)."""
    dc = i.data_center_info
    center: dict[str, Any] = {"@class": dc.class_name, "name": dc.name}
    if dc.metadata:
        center["metadata"] = _amazon(dc.metadata)
    d: dict[str, Any] = {
        "instanceId": i.instance_id,
        "hostName": i.host_name,
        "app": i.app,
        "ipAddr": i.ip_addr,
        "status": i.status.value,
        "port": {"$": i.port.number, "@enabled": "true" if i.port.enabled else "false"},
        "securePort": {
            "$": i.secure_port.number,
            "@enabled": "true" if i.secure_port.enabled else "false",
        },
        "dataCenterInfo": center,
    }
    if i.vip_address is not None:
        d["vipAddress"] = i.vip_address
    if i.secure_vip_address is not None:
        d["secureVipAddress"] = i.secure_vip_address
    d["lastUpdatedTimestamp"] = str(i.last_updated_ms)
    if i.action_type is not None:
        d["actionType"] = i.action_type.value
    if i.asg_name is not None:
        d["asgName"] = i.asg_name
    return d


def _json_parts(i: InstanceInfo) -> tuple[bytes, bytes]:
    item = orjson.dumps(instance_dict(i))
    # Sliced: a buffer of its own size (see json_codec.instance_parts).
    return item[:-1], b"}"


def _xml_parts(i: InstanceInfo) -> tuple[bytes, bytes]:
    out = ["<instance>"]
    leaf = xml_codec.leaf
    leaf(out, "instanceId", i.instance_id)
    leaf(out, "hostName", i.host_name)
    leaf(out, "app", i.app)
    leaf(out, "ipAddr", i.ip_addr)
    out.append(f"<status>{i.status.value}</status>")
    xml_codec.ports(out, i)
    dc = i.data_center_info
    xml_codec.data_center(out, dc.class_name, dc.name, _amazon(dc.metadata))
    if i.vip_address is not None:
        leaf(out, "vipAddress", i.vip_address)
    if i.secure_vip_address is not None:
        leaf(out, "secureVipAddress", i.secure_vip_address)
    out.append(f"<lastUpdatedTimestamp>{i.last_updated_ms}</lastUpdatedTimestamp>")
    if i.action_type is not None:
        out.append(f"<actionType>{i.action_type.value}</actionType>")
    if i.asg_name is not None:
        leaf(out, "asgName", i.asg_name)
    out.append("</instance>")
    return "".join(out).encode(), b""


class _Compact:
    """A full form's document pieces around compact items (made by `parts`), which have no
    lease part."""

    def __init__(self, full: Shape, parts: Callable[[InstanceInfo], tuple[bytes, bytes]]) -> None:
        self.SEPARATOR = full.SEPARATOR
        self.APPLICATIONS_TAIL = full.APPLICATIONS_TAIL
        self.APPLICATION_HEAD = full.APPLICATION_HEAD
        self.APPLICATION_TAIL = full.APPLICATION_TAIL
        self.instance_parts = parts
        self._full = full

    def instance_item(self, lease: LeaseRecord) -> bytes:
        head, tail = self.instance_parts(lease.instance)
        return head + tail

    def lease_part(self, lease: LeaseRecord) -> bytes:
        return b""

    def applications_head(self, *, version: str, hashcode: str) -> bytes:
        return self._full.applications_head(version=version, hashcode=hashcode)

    def application_block(self, name: str, items: Iterable[bytes]) -> bytes:
        return self._full.application_block(name, items)


JSON = _Compact(json_codec, _json_parts)
XML = _Compact(xml_codec, _xml_parts)
