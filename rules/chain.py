"""Eureka's FirstMatchWinsCompositeRule as a tuple of plain functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rules.rules import always_match, down_or_starting, lease_exists, override_exists
from rules.status import InstanceStatus

Rule = Callable[
    [InstanceStatus, InstanceStatus | None, InstanceStatus | None, bool], InstanceStatus | None
]

# The order of the non-AWS peer-aware registry. AlwaysMatch last guarantees an answer.
CHAIN: tuple[Rule, ...] = (down_or_starting, override_exists, lease_exists, always_match)


def first_match(
    chain: Sequence[Rule],
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus:
    """The status decided by the first rule of `chain` that answers."""
    for rule in chain:
        status = rule(claimed, override, existing, is_replication)
        if status is not None:
            return status
    raise LookupError("no rule matched: a chain must end with always_match")
