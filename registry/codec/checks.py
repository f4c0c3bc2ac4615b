"""A check's hold on an instance as peers send it in a registration's batch item
(`checkHeld`): `false`, or what the hold is (the client's claim, since when, why)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.codec import wire
from registry.core.checks import HeldDown
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
    since = wire.timestamp(value.get("since"), "checkHeld.since")
    detail = value.get("detail")
    if since is None or not isinstance(detail, str) or len(detail) > MAX_DETAIL:
        raise BadInput("checkHeld", f"needs since and a detail of {MAX_DETAIL} characters at most")
    return HeldDown(claim, since, detail)
