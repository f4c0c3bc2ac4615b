"""The store's compact form of an instance: its fields as one JSON array, in a fixed order.

Read back without the lenient wire reader (which checks and converts every field as a client
could have sent anything): a warm restart of 100 000 instances decodes each row with one
`orjson.loads` and a constructor call. The values were checked when the instance registered,
so only what a damaged row could break is checked again: the shape, the types, the statuses.
Rows written before this form (a JSON object, as `GET apps` shows an instance) are still read,
by the wire reader.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import Any

import orjson

from registry.errors import BadInput
from registry.model import ActionType, DataCenterInfo, InstanceInfo, InstanceStatus, PortInfo

_SHARED_MAX = 64  # strings up to this long are interned: apps, VIPs, metadata keys and values
_STATUSES = {status.value: status for status in InstanceStatus}
_ACTIONS = {action.value: action for action in ActionType}
_FIELDS = 29


def encode(i: InstanceInfo) -> bytes:
    dc = i.data_center_info
    return orjson.dumps(
        [
            i.instance_id,
            i.app,
            i.host_name,
            i.ip_addr,
            dc.name,
            dc.class_name,
            dict(dc.metadata) if dc.metadata else None,
            i.status.value,
            i.overridden_status.value,
            i.port.number,
            i.port.enabled,
            i.secure_port.number,
            i.secure_port.enabled,
            i.renewal_interval_secs,
            i.duration_secs,
            dict(i.metadata),
            i.sid,
            i.country_id,
            i.app_group_name,
            i.home_page_url,
            i.status_page_url,
            i.health_check_url,
            i.secure_health_check_url,
            i.vip_address,
            i.secure_vip_address,
            i.last_updated_ms,
            i.last_dirty_ms,
            None if i.action_type is None else i.action_type.value,
            i.asg_name,
        ]
    )


def decode(data: bytes | str, *, registered_ms: int | None = None) -> InstanceInfo:
    """The instance a row holds; BadInput when the row is damaged. With `registered_ms`, as a
    registration at that time leaves it (`actionType` ADDED, `lastUpdatedTimestamp` then), so a
    warm restart need not make each instance twice."""
    try:
        f = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadInput("record", f"damaged: {exc!r}") from None
    if type(f) is not list or len(f) != _FIELDS:
        raise BadInput("record", f"not an array of {_FIELDS} fields")
    shape = tuple(map(type, f))
    if shape not in _GOOD_SHAPES:
        _check(f)
        _GOOD_SHAPES.add(shape)
    if not f[0] or not f[1]:
        raise BadInput("record", "no instance id or application")
    try:
        return _instance(  # the fields in `encode`'s order
            f[0],
            _intern(f[1]),
            f[2],
            f[2] if f[3] == f[2] else f[3],  # one string for both (see wire.instance_from_wire)
            _data_center(f[4], f[5], f[6]),
            _STATUSES[f[7]],
            _STATUSES[f[8]],
            _port_info(f[9], f[10]),
            _port_info(f[11], f[12]),
            f[13],
            f[14],
            _map(f[15]),
            _shared(f[16]),
            f[17],
            _shared(f[18]),
            f[19],
            f[20],
            f[21],
            f[22],
            _shared(f[23]),
            _shared(f[24]),
            f[25] if registered_ms is None else registered_ms,
            f[26],
            (None if f[27] is None else _ACTIONS[f[27]]) if registered_ms is None else _ADDED,
            _shared(f[28]),
        )
    except (KeyError, TypeError) as exc:  # an unknown status, a metadata value not text
        raise BadInput("record", f"damaged: {exc!r}") from None


# What each field holds, in order (None: may be null). A row's shape (the type of each field)
# is checked against this once; rows of a shape already seen pass at the cost of a set lookup.
_TEXT, _NUMBER, _FLAG = (str,), (int,), (bool,)
_OPTIONAL_TEXT = (str, None)
_KINDS: tuple[tuple[type | None, ...], ...] = (
    *[_TEXT] * 6,  # instance id, app, host name, IP, data center name and class
    (dict, None),  # data center metadata
    *[_TEXT] * 2,  # status, overridden status
    *[_NUMBER, _FLAG] * 2,  # port and secure port
    *[_NUMBER] * 2,  # lease renewal interval and duration
    (dict,),  # metadata
    _TEXT,  # sid
    _NUMBER,  # country id
    *[_OPTIONAL_TEXT] * 7,  # app group, home page, status page, health checks, VIPs
    *[_NUMBER] * 2,  # last updated, last dirty
    *[_OPTIONAL_TEXT] * 2,  # action type, ASG name
)
_GOOD_SHAPES: set[tuple[type, ...]] = set()


def _check(fields: list[Any]) -> None:
    for n, (value, kinds) in enumerate(zip(fields, _KINDS, strict=True)):
        if not any(value is None if kind is None else type(value) is kind for kind in kinds):
            expected = " or ".join("null" if kind is None else kind.__name__ for kind in kinds)
            raise BadInput("record", f"field {n} is {value!r}, not {expected}")


_intern = sys.intern
_ADDED = ActionType.ADDED


def _constructor() -> Callable[..., InstanceInfo]:
    """A function of an instance's fields in order that sets them as a frozen dataclass's own
    `__init__` does, but through each slot's descriptor and without binding 25 keyword
    arguments: 2.4 µs an instance rather than 4.7 at a warm restart. Made once, as dataclasses
    make `__init__`, so that the fields' order is always `InstanceInfo`'s."""
    names = [f.name for f in dataclasses.fields(InstanceInfo)]
    lines = [f"def _instance({', '.join(names)}):", "    instance = _new(_cls)"]
    lines += [f"    _set_{name}(instance, {name})" for name in names]
    lines.append("    return instance")
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": InstanceInfo}
    scope.update({f"_set_{name}": getattr(InstanceInfo, name).__set__ for name in names})
    exec("\n".join(lines), scope)  # our own field names: nothing from outside
    return scope["_instance"]  # type: ignore[no-any-return]


_instance = _constructor()


def _shared(value: str | None) -> str | None:
    """One copy of a short value that many instances repeat (a VIP, an ASG, a group)."""
    return value if value is None or len(value) > _SHARED_MAX else _intern(value)


def _map(value: dict[str, Any]) -> dict[str, str]:
    shared = {}
    for key, item in value.items():
        if type(item) is not str:
            raise TypeError(f"metadata {key!r} is {item!r}, not a string")
        shared[_intern(key) if len(key) <= _SHARED_MAX else key] = (
            _intern(item) if len(item) <= _SHARED_MAX else item
        )
    return shared


@functools.cache
def _port_info(number: int, enabled: bool) -> PortInfo:
    return PortInfo(number, enabled)


def _data_center(name: str, class_name: str, metadata: dict[str, Any] | None) -> DataCenterInfo:
    if metadata is None:
        return _plain_data_center(name, class_name)
    return DataCenterInfo(name=name, class_name=class_name, metadata=_map(metadata))


@functools.cache
def _plain_data_center(name: str, class_name: str) -> DataCenterInfo:
    return DataCenterInfo(name=name, class_name=class_name)
