"""The store's compact form of an instance: its fields as one JSON array, in a fixed order.

Read back without the lenient wire reader (which checks and converts every field as a client
could have sent anything): a warm restart of 100 000 instances decodes each row with one
`orjson.loads` and a constructor call. The values were checked when the instance registered,
so only what a damaged row could break is checked again: the shape, the types, the statuses.
Rows written before this form (a JSON object, as `GET apps` shows an instance) are still read,
by the wire reader.
"""

from __future__ import annotations

import functools
import sys
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
        if not isinstance(f, list) or len(f) != _FIELDS:
            raise BadInput("record", f"not an array of {_FIELDS} fields")
        instance = InstanceInfo(
            instance_id=_text(f[0]),
            app=_shared(f[1]),
            host_name=_text(f[2]),
            ip_addr=_text(f[3]),
            data_center_info=_data_center(f[4], f[5], f[6]),
            status=_STATUSES[f[7]],
            overridden_status=_STATUSES[f[8]],
            port=_port(f[9], f[10]),
            secure_port=_port(f[11], f[12]),
            renewal_interval_secs=_number(f[13]),
            duration_secs=_number(f[14]),
            metadata=_map(f[15]),
            sid=_shared(f[16]),
            country_id=_number(f[17]),
            app_group_name=_optional(f[18]),
            home_page_url=_optional(f[19]),
            status_page_url=_optional(f[20]),
            health_check_url=_optional(f[21]),
            secure_health_check_url=_optional(f[22]),
            vip_address=_optional(f[23]),
            secure_vip_address=_optional(f[24]),
            last_updated_ms=_number(f[25]) if registered_ms is None else registered_ms,
            last_dirty_ms=_number(f[26]),
            action_type=(
                (None if f[27] is None else _ACTIONS[f[27]])
                if registered_ms is None
                else ActionType.ADDED
            ),
            asg_name=_optional(f[28]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise BadInput("record", f"damaged: {exc!r}") from None
    if not instance.instance_id or not instance.app:
        raise BadInput("record", "no instance id or application")
    return instance


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _shared(value: Any) -> str:
    text = _text(value)
    return sys.intern(text) if len(text) <= _SHARED_MAX else text


def _optional(value: Any) -> str | None:
    return None if value is None else _shared(value)


def _number(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError(f"{value!r} is not an object")
    return {_shared(key): _shared(item) for key, item in value.items()}


def _port(number: Any, enabled: Any) -> PortInfo:
    if type(number) is not int or type(enabled) is not bool:
        raise TypeError(f"{number!r}, {enabled!r} is not a port")
    return _port_info(number, enabled)


@functools.cache
def _port_info(number: int, enabled: bool) -> PortInfo:
    return PortInfo(number, enabled)


def _data_center(name: Any, class_name: Any, metadata: Any) -> DataCenterInfo:
    if metadata is None:
        return _plain_data_center(_text(name), _text(class_name))
    return DataCenterInfo(name=_text(name), class_name=_text(class_name), metadata=_map(metadata))


@functools.cache
def _plain_data_center(name: str, class_name: str) -> DataCenterInfo:
    return DataCenterInfo(name=name, class_name=class_name)
