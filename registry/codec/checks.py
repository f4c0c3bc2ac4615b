"""Server-side checks on the wire: a check's hold on an instance as peers send it in a
registration's batch item (`checkHeld`: `false`, or the client's claim, since when, why), and
admins' checks on applications."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from registry.checks.spec import app_check_from
from registry.codec import wire
from registry.core.app_checks import MAX_BY, AppCheck, AppChecks
from registry.core.checks import CheckVerdicts, HeldDown
from registry.core.model import InstanceStatus
from registry.errors import BadInput

MAX_DETAIL = 200  # characters of the check's last failure a peer's item may carry
MAX_APP = 256  # characters of an application's name


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


# Admins' checks on applications (registry/core/app_checks.py), as peers, the store and the
# admin plane show them: {"app", "check", "interval", "timeout", "path", "setAt", "setBy"}, and a
# removal as {"app", "removedAt"}.


def app_check_fields(check: AppCheck) -> dict[str, Any]:
    return {
        "app": check.app,
        "check": check.kind,
        "interval": check.interval,
        "timeout": check.timeout,
        "path": check.path,
        "setAt": check.set_ms,
        "setBy": check.by,
    }


def app_check_from_fields(fields: object) -> AppCheck:
    """An admin's check as a peer or the store sends it; BadInput when it does not read."""
    if not isinstance(fields, Mapping):
        raise BadInput("appCheck", "must be an object")
    app = _app(fields)
    set_ms = wire.timestamp(fields.get("setAt"), "appCheck.setAt")
    by = fields.get("setBy")
    if set_ms is None or not (by is None or (isinstance(by, str) and len(by) <= MAX_BY)):
        raise BadInput("appCheck", f"needs setAt, and a setBy of {MAX_BY} characters at most")
    spec = {
        k: v for k in ("check", "interval", "timeout", "path") if (v := fields.get(k)) is not None
    }
    return app_check_from(app, spec, now_ms=set_ms, by=by)


def app_check_removal_fields(app: str, at_ms: int) -> dict[str, Any]:
    return {"app": app, "removedAt": at_ms}


def app_check_removal_from_fields(fields: object) -> tuple[str, int]:
    if not isinstance(fields, Mapping):
        raise BadInput("appCheckRemoved", "must be an object")
    at_ms = wire.timestamp(fields.get("removedAt"), "appCheckRemoved.removedAt")
    if at_ms is None:
        raise BadInput("appCheckRemoved.removedAt", "missing")
    return _app(fields), at_ms


def app_checks_document(checks: AppChecks) -> dict[str, list[dict[str, Any]]]:
    """Every admin's check and removal, for a peer's start-up sync and anti-entropy."""
    return {
        "set": [app_check_fields(check) for check in checks],
        "removed": [app_check_removal_fields(app, at_ms) for app, at_ms in checks.removals()],
    }


def app_checks_from_document(
    document: object,
) -> tuple[list[AppCheck], list[tuple[str, int]]]:
    """A peer's admins' checks and removals; an entry that does not read is left out."""
    if not isinstance(document, Mapping):
        return [], []
    checks, removals = [], []
    for fields in _listed(document.get("set")):
        with contextlib.suppress(BadInput):
            checks.append(app_check_from_fields(fields))
    for fields in _listed(document.get("removed")):
        with contextlib.suppress(BadInput):
            removals.append(app_check_removal_from_fields(fields))
    return checks, removals


def _app(fields: Mapping[str, Any]) -> str:
    app = fields.get("app")
    if not isinstance(app, str):
        raise BadInput("appCheck.app", "must name an application")
    check_app_name(app, "appCheck.app")
    return app.upper()


def check_app_name(app: str, field: str) -> None:
    """An application a check may be set on: what every node and the store take back."""
    if not app or len(app) > MAX_APP:
        raise BadInput(field, f"must name an application ({MAX_APP} characters at most)")
    wire.check_path_segment(app, field)


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []
