"""Wire formats: the JSON and XML shapes of instances and applications, and reading them back.

`json_codec` and `xml_codec` write instances and documents in pieces (each is a `Shape`);
`wire` reads what clients and peers send, leniently where Eureka's clients differ and with a
precise refusal where input is bad; `notes` is the override notes' form between peers.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Protocol

from registry.codec import json_codec, xml_codec
from registry.codec.wire import instance_from_wire
from registry.core.model import InstanceInfo, LeaseRecord

__all__ = ["Format", "Shape", "encode_instance", "instance_from_wire", "shape"]


class Format(Enum):
    JSON = "application/json"
    XML = "application/xml"

    # Members are singletons compared by identity; Enum's own __hash__ is Python code, run on
    # every response-cache lookup (formats are part of its keys).
    __hash__ = object.__hash__

    @property
    def content_type(self) -> str:
        return self.value


class Shape(Protocol):
    """How one format writes documents in pieces (json_codec and xml_codec both are one)."""

    SEPARATOR: bytes  # between two items of a list
    APPLICATIONS_TAIL: bytes
    APPLICATION_HEAD: bytes  # around one application's block: GET apps/{app}
    APPLICATION_TAIL: bytes

    def instance_item(self, lease: LeaseRecord) -> bytes: ...
    def instance_parts(self, instance: InstanceInfo) -> tuple[bytes, bytes]: ...
    def lease_part(self, lease: LeaseRecord) -> bytes: ...
    def applications_head(self, *, version: str, hashcode: str) -> bytes: ...
    def application_block(self, name: str, items: Iterable[bytes]) -> bytes: ...


def shape(fmt: Format) -> Shape:
    return json_codec if fmt is Format.JSON else xml_codec


def encode_instance(fmt: Format, lease: LeaseRecord) -> bytes:
    if fmt is Format.JSON:
        return json_codec.encode_instance(lease)
    return xml_codec.encode_instance(lease)
