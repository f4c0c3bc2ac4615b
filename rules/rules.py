"""The four status rules of Eureka's peer-aware registry (contract 6.7).

Each rule looks at one decision and either answers a status or passes (None):

- `claimed`: the status the instance reports about itself (the registrant's or lease holder's),
- `override`: the admin override stored for its instance id, if any,
- `existing`: the status held by the instance's existing lease, None when it has no lease,
- `is_replication`: whether the call came from a peer.

Pure functions: no IO, no clock, no logging.
"""

from __future__ import annotations

from rules.status import InstanceStatus

_IN_SERVICE_OR_OUT = frozenset({InstanceStatus.UP, InstanceStatus.OUT_OF_SERVICE})


def down_or_starting(
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus | None:
    """An instance that says it is DOWN, STARTING or UNKNOWN is believed: nothing routes to it."""
    return None if claimed in _IN_SERVICE_OR_OUT else claimed


def override_exists(
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus | None:
    """An admin override beats whatever an UP or OUT_OF_SERVICE instance claims."""
    return override


def lease_exists(
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus | None:
    """For client calls the server's view (UP or OUT_OF_SERVICE) of a live lease wins.

    Peers are trusted instead: they carry the outcome of the rules on their side.
    """
    if is_replication or existing not in _IN_SERVICE_OR_OUT:
        return None
    return existing


def always_match(
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus | None:
    """Otherwise the instance's own status stands."""
    return claimed
