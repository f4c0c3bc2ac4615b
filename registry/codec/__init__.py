"""Wire formats: the JSON and XML shapes of instances and applications, and reading them back."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from registry.codec import json_codec, xml_codec
from registry.codec.wire import instance_from_wire
from registry.model import LeaseRecord

__all__ = [
    "Apps",
    "Format",
    "encode_application",
    "encode_applications",
    "encode_instance",
    "instance_from_wire",
]

Apps = Iterable[tuple[str, Iterable[LeaseRecord]]]


class Format(Enum):
    JSON = "application/json"
    XML = "application/xml"

    # Members are singletons compared by identity; Enum's own __hash__ is Python code, run on
    # every response-cache lookup (formats are part of its keys).
    __hash__ = object.__hash__

    @property
    def content_type(self) -> str:
        return self.value


def encode_instance(fmt: Format, lease: LeaseRecord) -> bytes:
    if fmt is Format.JSON:
        return json_codec.encode_instance(lease)
    return xml_codec.encode_instance(lease)


def encode_application(fmt: Format, name: str, leases: Iterable[LeaseRecord]) -> bytes:
    if fmt is Format.JSON:
        return json_codec.encode_application(name, leases)
    return xml_codec.encode_application(name, leases)


def encode_applications(fmt: Format, apps: Apps, *, version: str, hashcode: str) -> bytes:
    if fmt is Format.JSON:
        return json_codec.encode_applications(apps, version=version, hashcode=hashcode)
    return xml_codec.encode_applications(apps, version=version, hashcode=hashcode)
