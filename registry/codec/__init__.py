"""Wire formats: the JSON and XML shapes of instances and applications, and reading them back.

`json_codec` and `xml_codec` write instances and documents in pieces (each is a `Shape`);
`wire` reads what clients and peers send, leniently where Eureka's clients differ and with a
precise refusal where input is bad; `notes` is the override notes' form between peers, and
`peer_signature` how a peer signs a request with the peer credential.
"""

from __future__ import annotations

from enum import Enum

from registry.codec import compact, json_codec, xml_codec
from registry.codec.shape import Shape
from registry.codec.wire import instance_from_wire
from registry.core.model import LeaseRecord

__all__ = ["Format", "Shape", "encode_instance", "instance_from_wire", "shape"]


class Format(Enum):
    JSON = "application/json"
    XML = "application/xml"
    # Eureka's compact forms (`X-Eureka-Accept: compact`): instances without what a client
    # that only routes does not read (registry/codec/compact.py).
    JSON_COMPACT = "application/json;compact"
    XML_COMPACT = "application/xml;compact"

    # Members are singletons compared by identity; Enum's own __hash__ is Python code, run on
    # every response-cache lookup (formats are part of its keys).
    __hash__ = object.__hash__

    @property
    def content_type(self) -> str:
        return _CONTENT_TYPES[self]

    @property
    def compact(self) -> bool:
        """A compact form: its items carry no lease numbers, so age never makes them stale."""
        return self is Format.JSON_COMPACT or self is Format.XML_COMPACT

    @property
    def is_json(self) -> bool:
        return self is Format.JSON or self is Format.JSON_COMPACT

    def compacted(self) -> Format:
        return Format.JSON_COMPACT if self.is_json else Format.XML_COMPACT


_CONTENT_TYPES = {fmt: fmt.value.partition(";")[0] for fmt in Format}


def shape(fmt: Format) -> Shape:
    return _SHAPES[fmt]


_SHAPES: dict[Format, Shape] = {
    Format.JSON: json_codec,
    Format.XML: xml_codec,
    Format.JSON_COMPACT: compact.JSON,
    Format.XML_COMPACT: compact.XML,
}


def encode_instance(fmt: Format, lease: LeaseRecord) -> bytes:
    if fmt.is_json:
        return json_codec.encode_instance(lease)
    return xml_codec.encode_instance(lease)
