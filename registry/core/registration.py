"""What a registration makes of an instance: the status the rule chain gave it, what a copy
(a peer's, a store row) says its client claims, and what a re-registration keeps of the lease
it replaces.

For `Registry.register` (core/registry.py) and the warm restart's bulk `load`
(core/warm_restart.py), which gives each instance what `register` would.
"""

from __future__ import annotations

from msgspec.structs import replace

from registry.core.model import ActionType, InstanceInfo, InstanceStatus, Lease

_UP = InstanceStatus.UP
_UNKNOWN = InstanceStatus.UNKNOWN


def registered(
    instance: InstanceInfo, status: InstanceStatus, override: InstanceStatus | None, now_ms: int
) -> InstanceInfo:
    """The instance as a registration leaves it: with its status from the chain."""
    return replace(
        instance,
        status=status,
        overridden_status=_UNKNOWN if override is None else override,
        action_type=ActionType.ADDED,
        last_updated_ms=now_ms,
    )


def claim_of(instance: InstanceInfo) -> InstanceStatus:
    """The status a copy (a peer's, a store row) says its client claims. One whose status is
    its override's says nothing of the client's own: taken as UP, so that this node's override
    decides, if it has one (an admin's DOWN elsewhere must not pass for the client's own
    DOWN, which the chain's first rule would keep over any override)."""
    status = instance.status
    if status is instance.overridden_status and status is not _UNKNOWN:
        return _UP
    return status


def carry_counts(old: Lease, new: Lease) -> None:
    """A re-registration keeps what its client has delivered (core/preservation.py) over the
    time since it was first counted: a registration is no renewal, so a lease that only
    registers again weighs less and less. (A copy renewed earlier than ours, a peer's, moves
    the start back as much: its span never shrinks.)"""
    shrunk = max(0, old.last_renewal_ms - new.last_renewal_ms)
    new.counted_from_ms = old.counted_from_ms and old.counted_from_ms - shrunk
    new.renewals = old.renewals
    new.earlier_renewals = old.earlier_renewals
    new.earlier_ms = old.earlier_ms
    new.renewals_seen = old.renewals_seen
    new.renewed = new.renewed or old.renewed
    new.carried = new.carried or old.carried
