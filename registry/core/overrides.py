"""Admins' status overrides: the status each holds, what the admin said with it, and when
overrides were removed.

`Overrides` is the registry's part for them (`Registry.overrides`): a read-only mapping of
instance id to override status (the rule chain reads only that), with the `notes` of the rest
(why, when, until when, who), changed only through the registry's commands, which call the
methods here. Every change is told to the override subscribers (`Subscriber.on_override`) as
an `OverrideChange`: the store writes and records those, and needs to compare nothing.

A note belongs to the status it was given for: when the override changes without one (an
admin who gave no reason), the old note no longer applies and is not shown or written. Notes
travel to peers beside the replicated override and in the digest answer (their wire form:
registry/codec/notes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
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

    def of(self, instance_id: str, status: InstanceStatus | None) -> Note | None:
        """The note for the override `status` now in force on `instance_id`, if it has one
        (none where no override is in force: `status` None)."""
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


def _order(at_ms: int, status: InstanceStatus | None) -> tuple[int, str]:
    """How decisions on one override are ordered on every node (as admins' checks are,
    core/app_checks.py): by time, then a set over a removal (whose "" sorts before every
    status's name), then the greater status."""
    return (at_ms, "" if status is None else status.value)


class Overrides(Mapping[str, InstanceStatus]):
    """The overrides in force (instance id -> status), their notes and removals, and who is
    told of their changes. Which of two decisions on an instance is later is decided here, by
    the times of the notes and removals, so that every node keeps the latest."""

    def __init__(self) -> None:
        self._status: dict[str, InstanceStatus] = {}
        self.get = self._status.get  # type: ignore[method-assign]  # the heartbeat's lookup
        self.notes = OverrideNotes()
        self._listeners: list[Callable[[OverrideChange], None]] = []

    def __getitem__(self, instance_id: str) -> InstanceStatus:
        return self._status[instance_id]

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._status

    def __iter__(self) -> Iterator[str]:
        return iter(self._status)

    def __len__(self) -> int:
        return len(self._status)

    def listen(self, listener: Callable[[OverrideChange], None]) -> None:
        self._listeners.append(listener)

    def note_of(self, instance_id: str) -> Note | None:
        """The note of the override in force on `instance_id`, if it has one."""
        return self.notes.of(instance_id, self._status.get(instance_id))

    def older_than(self, instance_id: str, at_ms: int, status: InstanceStatus | None) -> bool:
        """Whether this node's last word on the instance's override (set, or removed) is
        older than a decision at `at_ms` setting `status` (None: removing it), or it has none.
        An override without a note (taken from a stock peer's copy) has no known time: any
        decision with one is newer. At the same time a set wins over a removal, then the
        greater status: two nodes' decisions dated alike must not each keep their own."""
        ours = self._latest(instance_id)
        return ours is None or ours < _order(at_ms, status)

    def next_ms(self, instance_id: str, now_ms: int) -> int:
        """The time to give an admin's new call on the override of `instance_id`: now, or
        just after this node's last word on it (a peer's decision dated ahead by its clock, two
        calls in one millisecond), so that the call is the latest decision everywhere."""
        ours = self._latest(instance_id)
        return now_ms if ours is None else max(now_ms, ours[0] + 1)

    def _latest(self, instance_id: str) -> tuple[int, str] | None:
        """The order of this node's last word on the override; None when it has no time."""
        status = self._status.get(instance_id)
        if status is not None:
            note = self.notes.of(instance_id, status)
            return None if note is None else _order(note.set_ms, status)
        removed_ms = self.notes.removed_at(instance_id)
        return None if removed_ms is None else _order(removed_ms, None)

    def set(
        self,
        app: str,
        instance_id: str,
        status: InstanceStatus,
        note: Note | None,
        *,
        at_ms: int,
        by: str | None = None,
    ) -> None:
        """An admin's decision (here or a peer's), told even when nothing but the note
        changed, or nothing at all: it is written again. Without a note, a note given for
        another status goes: it must not come back."""
        self._status[instance_id] = status
        if note is not None:
            self.notes.note(instance_id, note)
        elif self.notes.of(instance_id, status) is None:
            self.notes.forget(instance_id)
        self.tell(OverrideAction.SET, app, instance_id, at_ms, by)

    def take(self, app: str, instance_id: str, status: InstanceStatus, now_ms: int) -> bool:
        """An override a copy carries (a stock peer's registration or heartbeat, a store row):
        taken where this node holds none and removed none, since its time is unknown. Whether
        it was taken."""
        if instance_id in self._status or self.notes.removed_at(instance_id) is not None:
            return False
        self._status[instance_id] = status
        self.tell(OverrideAction.SET, app, instance_id, now_ms)
        return True

    def remove(
        self,
        app: str,
        instance_id: str,
        action: OverrideAction,
        *,
        now_ms: int,
        at_ms: int,
        by: str | None = None,
    ) -> InstanceStatus | None:
        """The override goes, removed as of `at_ms`; the status it held, None when there was
        none. The removal is remembered either way: a set older than it, arriving later from
        a peer, must lose to it."""
        status = self._status.pop(instance_id, None)
        self.notes.removed(instance_id, app, at_ms)
        if status is not None:
            self.tell(action, app, instance_id, now_ms, by)
        return status

    def take_notes(self, theirs: Iterable[tuple[str, Note]]) -> list[str]:
        """A peer's notes, for the overrides held here with the same status that lack one or
        hold an older one (start-up sync, anti-entropy); the instance ids of those taken."""
        taken = self.notes.take(theirs, self._status)
        for iid in taken:
            note = self.note_of(iid)
            assert note is not None  # just taken
            self.tell(OverrideAction.SET, note.app, iid, note.set_ms, note.by)
        return taken

    def expired(self, now_ms: int) -> list[tuple[str, Note]]:
        """The overrides in force whose expiry has come."""
        return list(self.notes.expired(self._status, now_ms))

    def restore(
        self,
        overrides: Mapping[str, InstanceStatus],
        notes: Iterable[tuple[str, Note]],
        removals: Iterable[tuple[str, str, int]],
    ) -> None:
        """A store's overrides, notes and removals (a warm restart): no one is told, the store
        holds them already."""
        for iid, app, at_ms in removals:
            self.notes.removed(iid, app, at_ms)
        self._status.update(overrides)
        for iid, note in notes:
            self.notes.note(iid, note)

    def tell(
        self,
        action: OverrideAction,
        app: str,
        instance_id: str,
        at_ms: int,
        by: str | None = None,
    ) -> None:
        """Tell the listeners what the override of `instance_id` (and its note) now is."""
        status = self._status.get(instance_id)
        note = self.notes.of(instance_id, status)
        change = OverrideChange(action, app, instance_id, status, at_ms, note, by)
        for listener in self._listeners:
            listener(change)
