"""Override notes on the wire between peers: beside a replicated override (a StatusUpdate
item) and in the digest answer, in fields of ours that stock Eureka peers ignore, so that every
node lists the same note and expires the override on time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.codec import wire
from registry.core.model import InstanceStatus
from registry.core.overrides import MAX_BY, MAX_EXPIRY_MS, MAX_REASON, Note, OverrideNotes
from registry.errors import BadInput

_REASON, _BY, _SET, _EXPIRES = (
    "overrideReason",
    "overrideSetBy",
    "overrideSetAt",
    "overrideExpiresAt",
)


def note_fields(note: Note) -> dict[str, Any]:
    return {_REASON: note.reason, _BY: note.by, _SET: note.set_ms, _EXPIRES: note.expires_ms}


def note_from(item: Mapping[str, Any], app: str, status: InstanceStatus) -> Note | None:
    """The note a replication item carries, if any; BadInput when its fields are malformed
    or pass the bounds an admin's call has (a peer's notes are checked as the admin's are:
    an expiry of Long.MAX_VALUE, once taken, won every later comparison on every node)."""
    set_ms = wire.timestamp(item.get(_SET), _SET)
    if set_ms is None:
        return None
    reason, by = wire.text(item, _REASON), wire.text(item, _BY)
    expires_ms = wire.timestamp(item.get(_EXPIRES), _EXPIRES)
    if reason is not None and len(reason) > MAX_REASON:
        raise BadInput(_REASON, f"is {len(reason)} characters; at most {MAX_REASON}")
    if by is not None and len(by) > MAX_BY:
        raise BadInput(_BY, f"is {len(by)} characters; at most {MAX_BY}")
    if expires_ms is not None and not 0 < expires_ms - set_ms <= MAX_EXPIRY_MS:
        raise BadInput(_EXPIRES, "must come after the override was set, within a year of it")
    return Note(app, status, reason, set_ms, expires_ms, by)


def notes_document(notes: OverrideNotes, overrides: Mapping[str, InstanceStatus]) -> list[Any]:
    """The notes of the overrides in force, as a peer reads them (the digest answer)."""
    return [
        {"id": iid, "appName": note.app, "status": note.status.value, **note_fields(note)}
        for iid, note in notes.in_force(overrides)
    ]


def removals_document(notes: OverrideNotes) -> list[Any]:
    """The override removals remembered, as a peer reads them (the digest answer)."""
    return [{"id": iid, "appName": app, "removedAt": at} for iid, app, at in notes.removals()]


def removals_from_document(listed: object) -> list[tuple[str, str, int]]:
    """A peer's `removals_document`; an entry that does not read is left out."""
    removals = []
    for entry in listed if isinstance(listed, list) else ():
        if not isinstance(entry, Mapping):
            continue
        try:
            iid, app = wire.text(entry, "id"), wire.text(entry, "appName")
            at_ms = wire.timestamp(entry.get("removedAt"), "removedAt")
        except BadInput:
            continue
        if iid and app and at_ms is not None:
            removals.append((iid, app, at_ms))
    return removals


def notes_from_document(listed: object) -> list[tuple[str, Note]]:
    """A peer's `notes_document`; an entry that does not read is left out."""
    notes = []
    for entry in listed if isinstance(listed, list) else ():
        if not isinstance(entry, Mapping):
            continue
        try:
            iid, app = wire.text(entry, "id"), wire.text(entry, "appName")
            status = wire.status(entry.get("status"), "status", default=InstanceStatus.UNKNOWN)
            note = note_from(entry, app or "", status)
        except BadInput:
            continue
        if iid and note is not None and status is not InstanceStatus.UNKNOWN:
            notes.append((iid, note))
    return notes
