"""XML bodies in the XStream shape Eureka serves by default (contract 5).

Element names are escaped as XStream does (`_` -> `__`, `$` -> `_-`); any other character a name
cannot hold (a metadata key like `app.kubernetes.io/name`) becomes `_x2f_`, which only this
escape can produce, so every key survives the round trip and the output is always well-formed.
Input is parsed with defusedxml: no DTDs, no entities.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from xml.etree.ElementTree import Element, ParseError
from xml.sax.saxutils import escape, quoteattr

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from registry.codec.wire import lease_numbers, optional_texts
from registry.core.model import InstanceInfo, LeaseRecord
from registry.errors import BadInput

_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9.\-]*")
_NAME_CHAR = re.compile(r"[A-Za-z0-9.\-]")
_ESCAPED = re.compile(r"__|_-|_x([0-9a-f]+)_")


def escape_name(key: str) -> str:
    if _PLAIN_NAME.fullmatch(key):
        return key
    out = []
    for position, ch in enumerate(key):
        if ch == "_":
            out.append("__")
        elif ch == "$":
            out.append("_-")
        elif _NAME_CHAR.match(ch) and (position > 0 or ch.isalpha()):
            out.append(ch)
        else:
            out.append(f"_x{ord(ch):x}_")
    return "".join(out)


def unescape_name(tag: str) -> str:
    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "__":
            return "_"
        if token == "_-":
            return "$"
        try:
            return chr(int(match.group(1), 16))
        except (ValueError, OverflowError):
            raise BadInput("body", f"<{tag}> escapes a character that does not exist") from None

    return _ESCAPED.sub(replace, tag)


# Decoding ------------------------------------------------------------------------------------


# Elements that hold a map even when empty or pretty-printed with only whitespace inside, by
# the element they are in: an instance's own maps, and the Amazon metadata of its data center.
_MAPS = {
    "instance": frozenset({"metadata", "leaseInfo", "dataCenterInfo"}),
    "dataCenterInfo": frozenset({"metadata"}),
}
# An instance is four levels deep at most (instance > dataCenterInfo > metadata > key).
_MAX_DEPTH = 8


def decode(body: bytes | str, *, root: str) -> Any:
    """Parse an XML body into the same dict shape as its JSON twin; BadInput when it is not XML.

    Bytes are decoded as the XML declaration says (UTF-8 without one); text is taken as is.
    """
    try:
        element = fromstring(body, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise BadInput(
            "body", f"XML with DTDs or entities is refused ({type(exc).__name__})"
        ) from None
    except (ParseError, ValueError, LookupError) as exc:  # LookupError: unknown encoding
        raise BadInput("body", f"cannot parse request body as XML: {exc}") from None
    if element.tag != root:
        raise BadInput("body", f"the root element must be <{root}>, not <{element.tag}>")
    return _to_wire(element, depth=1, is_map=True)


def _to_wire(element: Element, *, depth: int, is_map: bool) -> Any:
    if depth > _MAX_DEPTH:
        raise BadInput("body", f"elements nested deeper than {_MAX_DEPTH} levels")
    attributes = {f"@{name}": value for name, value in element.attrib.items()}
    if len(element) or is_map:
        maps = _MAPS.get(element.tag, frozenset()) if depth <= 2 else frozenset()
        d: dict[str, Any] = {
            unescape_name(child.tag): _to_wire(child, depth=depth + 1, is_map=child.tag in maps)
            for child in element
        }
        d.update(attributes)
        return d
    text = element.text or ""
    if attributes:  # <port enabled="true">8080</port>
        return {"$": text, **attributes}
    return text


# Encoding ------------------------------------------------------------------------------------


def encode_instance(lease: LeaseRecord) -> bytes:
    return instance_item(lease)


# Documents are assembled from pieces as the JSON ones are (see json_codec).
SEPARATOR = b""
APPLICATIONS_TAIL = b"</applications>"
APPLICATION_HEAD = b""  # GET apps/{app}: the application's block is the whole document
APPLICATION_TAIL = b""


def instance_item(lease: LeaseRecord) -> bytes:
    head, tail = instance_parts(lease.instance)
    return head + lease_part(lease) + tail


def instance_parts(i: InstanceInfo) -> tuple[bytes, bytes]:
    """The item around its `leaseInfo` (see json_codec.instance_parts)."""
    head: list[str] = []
    tail: list[str] = []
    _head(head, i)
    _tail(tail, i)
    return "".join(head).encode(), "".join(tail).encode()


def lease_part(lease: LeaseRecord) -> bytes:
    return _LEASE % lease_numbers(lease)


_LEASE = (
    b"<leaseInfo>"
    b"<renewalIntervalInSecs>%d</renewalIntervalInSecs>"
    b"<durationInSecs>%d</durationInSecs>"
    b"<registrationTimestamp>%d</registrationTimestamp>"
    b"<lastRenewalTimestamp>%d</lastRenewalTimestamp>"
    b"<evictionTimestamp>%d</evictionTimestamp>"
    b"<serviceUpTimestamp>%d</serviceUpTimestamp>"
    b"</leaseInfo>"
)


def applications_head(*, version: str, hashcode: str) -> bytes:
    return (
        f"<applications><versions__delta>{escape(version)}</versions__delta>"
        f"<apps__hashcode>{escape(hashcode)}</apps__hashcode>"
    ).encode()


def application_block(name: str, items: Iterable[bytes]) -> bytes:
    return (
        f"<application><name>{escape(name)}</name>".encode() + b"".join(items) + b"</application>"
    )


def _head(out: list[str], i: InstanceInfo) -> None:
    out.append("<instance>")
    leaf(out, "instanceId", i.instance_id)
    leaf(out, "hostName", i.host_name)
    leaf(out, "app", i.app)
    leaf(out, "ipAddr", i.ip_addr)
    if i.sid not in ("na", "unknown"):
        leaf(out, "sid", i.sid)
    out.append(f"<status>{i.status.value}</status>")
    out.append(f"<overriddenstatus>{i.overridden_status.value}</overriddenstatus>")
    ports(out, i)
    out.append(f"<countryId>{i.country_id}</countryId>")
    dc = i.data_center_info
    data_center(out, dc.class_name, dc.name, dc.metadata)


def ports(out: list[str], i: InstanceInfo) -> None:
    out.append(f'<port enabled="{_bool(i.port.enabled)}">{i.port.number}</port>')
    out.append(
        f'<securePort enabled="{_bool(i.secure_port.enabled)}">{i.secure_port.number}</securePort>'
    )


def data_center(out: list[str], class_name: str, name: str, metadata: Mapping[str, str]) -> None:
    out.append(f"<dataCenterInfo class={quoteattr(class_name)}>")
    leaf(out, "name", name)
    if metadata:
        _map(out, metadata)
    out.append("</dataCenterInfo>")


def _tail(out: list[str], i: InstanceInfo) -> None:
    if i.metadata:
        _map(out, i.metadata)
    else:
        out.append('<metadata class="java.util.Collections$EmptyMap"/>')
    for tag, value in optional_texts(i):
        if value is not None:
            leaf(out, tag, value)
    out.append("<isCoordinatingDiscoveryServer>false</isCoordinatingDiscoveryServer>")
    out.append(f"<lastUpdatedTimestamp>{i.last_updated_ms}</lastUpdatedTimestamp>")
    out.append(f"<lastDirtyTimestamp>{i.last_dirty_ms}</lastDirtyTimestamp>")
    if i.action_type is not None:
        out.append(f"<actionType>{i.action_type.value}</actionType>")
    if i.asg_name is not None:
        leaf(out, "asgName", i.asg_name)
    out.append("</instance>")


def _map(out: list[str], entries: Mapping[str, str]) -> None:
    out.append("<metadata>")
    for key, value in entries.items():
        leaf(out, escape_name(key), value)
    out.append("</metadata>")


def leaf(out: list[str], tag: str, value: str) -> None:
    out.append(f"<{tag}>{escape(value)}</{tag}>")


def _bool(flag: bool) -> str:
    return "true" if flag else "false"
