"""Eureka's FirstMatchWinsCompositeRule as a tuple of plain functions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from rules.rules import always_match, down_or_starting, lease_exists, override_exists
from rules.status import InstanceStatus

Rule = Callable[
    [InstanceStatus, InstanceStatus | None, InstanceStatus | None, bool], InstanceStatus | None
]

# The order of the non-AWS peer-aware registry. AlwaysMatch last guarantees an answer.
CHAIN: tuple[Rule, ...] = (down_or_starting, override_exists, lease_exists, always_match)


def answers(
    chain: Sequence[Rule],
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> Iterator[tuple[Rule, InstanceStatus | None]]:
    """Each rule of `chain` with its answer, in order, up to the first that answers: the one
    loop over the chain that deciding, and explaining a decision, both read."""
    for rule in chain:
        status = rule(claimed, override, existing, is_replication)
        yield rule, status
        if status is not None:
            return


def _first(
    chain: Sequence[Rule],
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> tuple[Rule, InstanceStatus]:
    for rule, status in answers(chain, claimed, override, existing, is_replication):
        if status is not None:
            return rule, status
    raise LookupError("no rule matched: a chain must end with always_match")


def first_match(
    chain: Sequence[Rule],
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> InstanceStatus:
    """The status decided by the first rule of `chain` that answers."""
    return _first(chain, claimed, override, existing, is_replication)[1]


NAMES: dict[Rule, str] = {
    down_or_starting: "DownOrStarting",
    override_exists: "OverrideExists",
    lease_exists: "LeaseExists",
    always_match: "AlwaysMatch",
}


class Decision(NamedTuple):
    """Why an instance has its status: the rule (or the admin action) that set it, and what
    it saw. Kept on each lease, interned, so a lease pays one reference for it."""

    by: str
    claimed: InstanceStatus | None
    override: InstanceStatus | None
    existing: InstanceStatus | None
    replication: bool


_INTERNED: dict[Decision, Decision] = {}


def interned(decision: Decision) -> Decision:
    """The one shared copy of `decision` (there are a few hundred possible ones)."""
    return _INTERNED.setdefault(decision, decision)


def decide(
    chain: Sequence[Rule],
    claimed: InstanceStatus,
    override: InstanceStatus | None,
    existing: InstanceStatus | None,
    is_replication: bool,
) -> tuple[InstanceStatus, Decision]:
    """`first_match`, and which rule answered with what inputs."""
    rule, status = _first(chain, claimed, override, existing, is_replication)
    return status, interned(Decision(NAMES[rule], claimed, override, existing, is_replication))


def trace(chain: Sequence[Rule], decision: Decision) -> list[tuple[str, InstanceStatus | None]]:
    """Each rule's answer to a decision's inputs, in order, up to the one that answered."""
    if decision.claimed is None:  # an admin's action, not the chain, set the status
        return []
    return [
        (NAMES[rule], status)
        for rule, status in answers(
            chain, decision.claimed, decision.override, decision.existing, decision.replication
        )
    ]
