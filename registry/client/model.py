"""What the client hands its callers: instances as the registry lists them, and changes to them.

`Instance.from_wire` reads one instance of a fetched document, in the lenient way every Eureka
reader does (scalars as strings or numbers, `port` as an object or a bare number, a status it
does not know as UNKNOWN); the lease's timestamps are left out, since every fetch moves them and
a copy compared by them would see changes where there are none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rules import InstanceStatus


class Action(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    app: str  # upper case, as the registry keys it
    instance_id: str
    host_name: str
    ip_addr: str
    status: InstanceStatus
    overridden_status: InstanceStatus = InstanceStatus.UNKNOWN
    port: int | None = None  # None: the plain port is not enabled
    secure_port: int | None = None  # None: the secure port is not enabled
    vip_address: str | None = None  # may be a comma-separated list
    secure_vip_address: str | None = None
    home_page_url: str | None = None
    status_page_url: str | None = None
    health_check_url: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    # Owned by the instance: the last time it changed its own record
    last_dirty_ms: int = field(default=0, compare=False)
    # Its VIP addresses, plain and secure, upper-cased as lookups compare them
    vips: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = f"{self.vip_address or ''},{self.secure_vip_address or ''}".upper().split(",")
        object.__setattr__(self, "vips", tuple(dict.fromkeys(filter(None, map(str.strip, names)))))

    @property
    def url(self) -> str:
        """Where to call it: https on its secure port when that is enabled, else http."""
        host = f"[{self.ip_addr}]" if ":" in self.ip_addr else self.ip_addr  # IPv6
        if self.secure_port is not None:
            return f"https://{host}:{self.secure_port}/"
        return f"http://{host}:{self.port if self.port is not None else 80}/"

    @classmethod
    def from_wire(cls, item: Mapping[str, Any]) -> Instance:
        """An instance of a fetched JSON document; KeyError or ValueError if it is none."""
        host = str(item["hostName"])
        metadata = item.get("metadata") or {}
        return cls(
            app=str(item["app"]).upper(),
            instance_id=str(item.get("instanceId") or host),
            host_name=host,
            ip_addr=str(item.get("ipAddr") or host),
            status=_status(item.get("status", "UP")),  # Eureka's default
            overridden_status=_status(
                item.get("overriddenStatus", item.get("overriddenstatus", "UNKNOWN"))
            ),
            port=_port(item.get("port")),
            secure_port=_port(item.get("securePort"), enabled_by_default=False),
            vip_address=_text(item.get("vipAddress")),
            secure_vip_address=_text(item.get("secureVipAddress")),
            home_page_url=_text(item.get("homePageUrl")),
            status_page_url=_text(item.get("statusPageUrl")),
            health_check_url=_text(item.get("healthCheckUrl")),
            metadata={str(k): str(v) for k, v in metadata.items() if k != "@class"},
            last_dirty_ms=int(item.get("lastDirtyTimestamp") or 0),
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One instance added to, changed in or removed from the client's copy."""

    action: Action
    instance: Instance  # as it is now; for DELETED, as it was last


def _status(value: Any) -> InstanceStatus:
    try:
        return InstanceStatus(str(value).upper())
    except ValueError:
        return InstanceStatus.UNKNOWN


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _port(value: Any, *, enabled_by_default: bool = True) -> int | None:
    """A port object `{"$": 8080, "@enabled": "true"}` (or a bare number): None if disabled."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return int(value) if enabled_by_default else None
    enabled = value.get("@enabled", enabled_by_default)
    if str(enabled).lower() != "true":
        return None
    return int(value["$"])
