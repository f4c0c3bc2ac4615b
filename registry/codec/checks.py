"""A check's hold on an instance as peers send it in a registration's batch item
(`checkHeld`): `false`, or what the hold is (the client's claim, since when, why)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.codec import wire
from registry.core.checks import CheckVerdicts, HeldDown
from registry.core.model import InstanceStatus
from registry.errors import BadInput

MAX_DETAIL = 200  # characters of the check's last failure a peer's item may carry


def held_fields(held: HeldDown | None) -> dict[str, Any] | bool:
    if held is None:
        return False
    return {"claim": held.claim.value, "since": held.since_ms, "detail": held.detail}


def held_from_item(value: object) -> HeldDown | None:
    """`checkHeld` read; BadInput when it does not read."""
    if value is False:
        return None
    if not isinstance(value, Mapping):
        raise BadInput("checkHeld", "must be false or an object")
    claim = wire.status(value.get("claim"), "checkHeld.claim", default=InstanceStatus.UNKNOWN)
    if claim is InstanceStatus.UNKNOWN:  # released to UNKNOWN, its heartbeats would get 404s
        raise BadInput("checkHeld.claim", "names the client's own status: UP, DOWN, ...")
    since = wire.timestamp(value.get("since"), "checkHeld.since")
    detail = value.get("detail")
    if since is None or not isinstance(detail, str) or len(detail) > MAX_DETAIL:
        raise BadInput("checkHeld", f"needs since and a detail of {MAX_DETAIL} characters at most")
    return HeldDown(claim, since, detail)


def holds_document(checks: CheckVerdicts) -> dict[str, Any]:
    """Every hold, by instance id, for a peer's start-up sync and anti-entropy."""
    return {iid: held_fields(held) for iid, held in checks.items()}


def holds_from_document(document: object) -> dict[str, HeldDown]:
    """A peer's holds; an entry that does not read is left out."""
    if not isinstance(document, Mapping):
        return {}
    holds = {}
    for iid, fields in document.items():
        try:
            held = held_from_item(fields)
        except BadInput:
            continue
        if isinstance(iid, str) and held is not None:
            holds[iid] = held
    return holds
