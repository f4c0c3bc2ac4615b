"""What the registry holds: instances as clients describe them, and the leases that keep them.

`InstanceInfo` is immutable: a change makes a new one with `msgspec.structs.replace`, so a
snapshot handed to the journal or an encoder can never change under it. `Lease` is the one
mutable object, because a heartbeat must cost no more than storing one integer.

An instance and its parts are msgspec structs rather than dataclasses: made, copied and
decoded from the store in C (a warm restart of 100 000 instances decodes each in about 3 µs,
where building a dataclass from its fields alone took 2.4), and never tracked by the garbage
collector (`gc=False`: they hold only strings, numbers, flat mappings and each other, so
they can form no cycle), which keeps full collections from walking 100 000 of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import msgspec

from registry.errors import BadInput
from rules import Decision, InstanceStatus

__all__ = [
    "AMAZON_CLASS",
    "DEFAULT_DATA_CENTER_CLASS",
    "ActionType",
    "ChangeEvent",
    "DataCenterInfo",
    "InstanceInfo",
    "InstanceStatus",
    "Lease",
    "LeaseRecord",
    "LeaseSnapshot",
    "PortInfo",
    "ReplicationAction",
]

# An instance's metadata is copied into every fetch and stream: bounded.
MAX_METADATA_ENTRIES = 256
MAX_METADATA_CHARS = 64 * 1024
AMAZON_CLASS = "com.netflix.appinfo.AmazonInfo"
DEFAULT_DATA_CENTER_CLASS = "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"


class ActionType(StrEnum):
    """What the last change did to an instance, as delta clients read it."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class ReplicationAction(StrEnum):
    """A change a node sends its peers, named as in the batch wire format (contract 11.4)."""

    REGISTER = "Register"
    HEARTBEAT = "Heartbeat"
    CANCEL = "Cancel"
    STATUS_UPDATE = "StatusUpdate"
    DELETE_STATUS_OVERRIDE = "DeleteStatusOverride"
    # Ours, sent to our peers only: an admin's check on an application (core/app_checks.py).
    APP_CHECK = "AppCheck"


# array_like: the store keeps an instance as a JSON array of its fields in this order
# (registry.store.record), so a field is added at the end, never moved.
class PortInfo(msgspec.Struct, frozen=True, gc=False, array_like=True):
    number: int
    enabled: bool


class DataCenterInfo(msgspec.Struct, frozen=True, gc=False, kw_only=True, array_like=True):
    name: str  # Netflix, Amazon or MyOwn
    class_name: str = DEFAULT_DATA_CENTER_CLASS
    metadata: Mapping[str, str] = msgspec.field(default_factory=dict)  # Amazon only, verbatim


class InstanceInfo(msgspec.Struct, frozen=True, gc=False, kw_only=True, array_like=True):
    """One instance with every field of the wire format (contract 4.2).

    The lease timestamps of `leaseInfo` are not here: they belong to the `Lease` and are
    written from it on every read. Mappings are never mutated after construction.
    """

    instance_id: str
    app: str
    host_name: str
    ip_addr: str
    data_center_info: DataCenterInfo
    status: InstanceStatus = InstanceStatus.UP
    overridden_status: InstanceStatus = InstanceStatus.UNKNOWN
    port: PortInfo = PortInfo(7001, True)
    secure_port: PortInfo = PortInfo(7002, False)
    renewal_interval_secs: int = 30
    duration_secs: int = 90
    metadata: Mapping[str, str] = msgspec.field(default_factory=dict)
    sid: str = "na"
    country_id: int = 1
    app_group_name: str | None = None
    home_page_url: str | None = None
    status_page_url: str | None = None
    health_check_url: str | None = None
    secure_health_check_url: str | None = None
    vip_address: str | None = None
    secure_vip_address: str | None = None
    last_updated_ms: int = 0
    last_dirty_ms: int = 0
    action_type: ActionType | None = None
    asg_name: str | None = None


class LeaseRecord(Protocol):
    """What an encoder reads of a lease: a live `Lease` or a `LeaseSnapshot`."""

    @property
    def instance(self) -> InstanceInfo: ...
    @property
    def registration_ms(self) -> int: ...
    @property
    def last_renewal_ms(self) -> int: ...
    @property
    def eviction_ms(self) -> int: ...
    @property
    def service_up_ms(self) -> int: ...
    @property
    def renewed(self) -> bool: ...


@dataclass(slots=True)
class Lease:
    """The registry's hold on one instance; alive while heartbeats keep renewing it."""

    instance: InstanceInfo
    duration_ms: int
    registration_ms: int
    last_renewal_ms: int
    service_up_ms: int = 0
    eviction_ms: int = 0
    decision: Decision | None = None  # why the instance has its status (GET status/explain)
    # Not expired before this time, whatever its last renewal: the grace a restored lease gets
    # to be renewed (or an admin's call gives), kept apart from its last renewal, which stays
    # the evidence peers weigh.
    grace_until_ms: int = 0
    # What its client delivers, which self-preservation weighs (core/preservation.py), kept
    # through a re-registration. `renewals` counts the renewals since `counted_from_ms` (its
    # registration here, in the frame of `last_renewal_ms`; 0: from its next renewal);
    # `earlier_renewals` over `earlier_ms` is the stretch before, so that the rate is measured
    # over the last stretch of its life, not all of it; `renewals_seen` is their sum at the
    # last counting window's end. `renewed`: renewed at least once, here or (for a copy)
    # where it came from; kept in the store. `carried`: a copy (a store's, a peer's) of a
    # lease that was renewing before it came here.
    counted_from_ms: int = 0
    renewals: int = 0
    earlier_renewals: int = 0
    earlier_ms: int = 0
    renewals_seen: int = 0
    renewed: bool = False
    carried: bool = False

    def renew(self, now_ms: int, legacy: bool = False) -> None:
        """Record a heartbeat (the registry counts it: `Registry.renew`).

        Legacy mode stores now + duration, as Eureka does (contract 7): renewed leases then
        live 2 x duration and `lastRenewalTimestamp` is future-dated.
        """
        self.last_renewal_ms = now_ms + self.duration_ms if legacy else now_ms

    def hold(self, now_ms: int) -> None:
        """Kept alive by an admin's call (contract 6.5, 6.6): not expired within a duration
        from now, without counting as a renewal, which is the client's evidence of life."""
        self.grace_until_ms = max(self.grace_until_ms, now_ms + self.duration_ms)

    def is_expired(self, now_ms: int, extra_ms: int = 0) -> bool:
        """Cancelled, or not renewed for longer than its duration (plus `extra_ms` of grace)
        and out of its restored grace."""
        return self.eviction_ms > 0 or (
            now_ms > self.last_renewal_ms + self.duration_ms + extra_ms
            and now_ms > self.grace_until_ms
        )

    def snapshot(self) -> LeaseSnapshot:
        return LeaseSnapshot(
            instance=self.instance,
            registration_ms=self.registration_ms,
            last_renewal_ms=self.last_renewal_ms,
            eviction_ms=self.eviction_ms,
            service_up_ms=self.service_up_ms,
            duration_ms=self.duration_ms,
            renewed=self.renewed,
        )


@dataclass(slots=True, frozen=True, kw_only=True)
class LeaseSnapshot:
    """A lease as it was at one change; what the delta journal keeps."""

    instance: InstanceInfo
    registration_ms: int
    last_renewal_ms: int
    eviction_ms: int
    service_up_ms: int
    duration_ms: int
    renewed: bool = False


@dataclass(slots=True, frozen=True, kw_only=True)
class ChangeEvent:
    """One change of the registry, emitted to every subscriber in index order.

    `previous` is the instance as it was before the change, None for a brand-new registration:
    what the cache needs to drop the VIPs an instance left, and self-preservation to tell a new
    client from a re-registration.
    """

    action: ActionType
    lease: LeaseSnapshot
    index: int
    at_ms: int
    previous: InstanceInfo | None = None


def check_metadata_size(metadata: Mapping[str, object], field: str = "metadata") -> None:
    """Refuse metadata past its bounds: every instance's metadata is copied into every fetch
    and stream, and 300 registrations of 18 000 keys each took a server from 209 MB to 1.8 GB."""
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise BadInput(field, f"{len(metadata)} entries; at most {MAX_METADATA_ENTRIES}")
    chars = sum(len(k) + (len(v) if isinstance(v, str) else 0) for k, v in metadata.items())
    if chars > MAX_METADATA_CHARS:
        raise BadInput(field, f"{chars} characters in all; at most {MAX_METADATA_CHARS}")
