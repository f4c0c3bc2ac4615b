"""What an admin said with an override: why, when, until when, and who.

The registry holds each override's status (the rule chain reads only that) and, in
`Registry.notes`, these notes of the rest, keyed by instance id: set, taken from peers,
forgotten and expired only through the registry's commands. A note belongs to the status it
was given for: when the override changes without one (an admin who gave no reason), the old
note no longer applies and is not shown or written. Notes travel to peers beside the
replicated override and in the digest answer (their wire form: registry/codec/notes.py).

Every command that changes an override (or its note) tells the registry's override
subscribers with an `OverrideChange`: the store writes and records those, and needs to compare
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from registry.core.model import InstanceStatus

MAX_REASON = 1000  # characters of an override's reason
MAX_BY = 200  # characters of the name of who set it
# The furthest an override's expiry may be: beyond a year it is no expiry, and a time past
# what every reader can render (year 9999) is a way to break the status page for everyone.
MAX_EXPIRY_MS = 366 * 86_400_000


@dataclass(frozen=True, slots=True)
class Note:
    app: str
    status: InstanceStatus
    reason: str | None
    set_ms: int
    expires_ms: int | None
    by: str | None = None  # the admin's user name, when credentials are configured


class OverrideAction(StrEnum):
    """What happened to an override, as its history records it."""

    SET = "set"  # set or set again, by an admin here or on a peer, or its note taken
    DELETED = "deleted"
    EXPIRED = "expired"
    INSTANCE_CANCELLED = "instance_cancelled"  # its instance went, the override stays


@dataclass(frozen=True, slots=True)
class OverrideChange:
    """An override's change: `status` is the override in force afterwards (None: gone), with
    its `note` when it has one; `by` is who acted, when known."""

    action: OverrideAction
    app: str
    instance_id: str
    status: InstanceStatus | None
    at_ms: int
    note: Note | None = None
    by: str | None = None


class OverrideNotes:
    """The notes of the overrides in force, and when each override removed was removed (an
    admin's delete, an expiry): with the notes' times, what decides which of two nodes holds
    the later decision on an instance's override."""

    def __init__(self) -> None:
        self._notes: dict[str, Note] = {}
        self._removed: dict[str, tuple[str, int]] = {}  # instance id -> (app, when)

    def note(self, instance_id: str, note: Note) -> None:
        self._notes[instance_id] = note
        self._removed.pop(instance_id, None)

    def forget(self, instance_id: str) -> None:
        self._notes.pop(instance_id, None)

    def removed(self, instance_id: str, app: str, at_ms: int) -> None:
        """The override of `instance_id` was removed at `at_ms` (the latest time is kept)."""
        self._notes.pop(instance_id, None)
        earlier = self._removed.get(instance_id)
        if earlier is None or earlier[1] < at_ms:
            self._removed[instance_id] = (app, at_ms)

    def removed_at(self, instance_id: str) -> int | None:
        """When the override of `instance_id` was removed, if that is remembered."""
        found = self._removed.get(instance_id)
        return None if found is None else found[1]

    def removals(self) -> Iterator[tuple[str, str, int]]:
        """(instance id, app, when) of each override removal remembered."""
        for iid, (app, at_ms) in self._removed.items():
            yield iid, app, at_ms

    def purge_removals(self, *, before_ms: int) -> int:
        """Forget removals older than `before_ms` (a retention); how many went."""
        old = [iid for iid, (_, at_ms) in self._removed.items() if at_ms < before_ms]
        for iid in old:
            del self._removed[iid]
        return len(old)

    def of(self, instance_id: str, status: InstanceStatus) -> Note | None:
        """The note for the override `status` now in force on `instance_id`, if it has one."""
        note = self._notes.get(instance_id)
        return note if note is not None and note.status is status else None

    def in_force(self, overrides: Mapping[str, InstanceStatus]) -> Iterator[tuple[str, Note]]:
        """The notes of the overrides in force."""
        for iid, note in self._notes.items():
            if overrides.get(iid) is note.status:
                yield iid, note

    def take(
        self, theirs: Iterable[tuple[str, Note]], overrides: Mapping[str, InstanceStatus]
    ) -> list[str]:
        """A peer's notes (its start-up sync or anti-entropy answer), for the overrides in
        force here with the same status that have no note here or an older one; the ids of
        those taken."""
        taken = []
        for iid, note in theirs:
            ours = self.of(iid, note.status)
            if overrides.get(iid) is note.status and (ours is None or ours.set_ms < note.set_ms):
                self._notes[iid] = note
                taken.append(iid)
        return taken

    def expired(
        self, overrides: Mapping[str, InstanceStatus], now_ms: int
    ) -> Iterator[tuple[str, Note]]:
        """The overrides in force whose expiry has come."""
        for iid, note in list(self._notes.items()):
            if overrides.get(iid) is not note.status:
                del self._notes[iid]  # the override it described is gone or changed
            elif note.expires_ms is not None and note.expires_ms <= now_ms:
                yield iid, note
