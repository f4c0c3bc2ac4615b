"""Override notes: the note a peer lists is taken only for an override in force here with
the same status, and only when newer than ours; the peers' document reads back what it says.
Decisions dated alike on two nodes are ordered alike on both, and an admin's call is dated
after the node's last word."""

from __future__ import annotations

import itertools

from registry.codec.notes import notes_document, notes_from_document
from registry.core.model import InstanceStatus
from registry.core.overrides import Note, OverrideAction, OverrideChange, OverrideNotes, Overrides
from registry.core.registry import Registry
from tests.factories import T0, make

S = InstanceStatus


def note(status: InstanceStatus, set_ms: int, reason: str = "why") -> Note:
    return Note("ORDERS", status, reason, set_ms, set_ms + 60_000, "ops")


def test_a_peers_note_is_taken_for_the_same_override_when_newer_or_missing():
    notes = OverrideNotes()
    notes.note("older", note(S.DOWN, 1, "ours"))
    notes.note("newer", note(S.DOWN, 9, "ours"))
    overrides = {"older": S.DOWN, "newer": S.DOWN, "missing": S.DOWN, "other": S.DOWN}
    theirs = [
        ("older", note(S.DOWN, 5, "theirs")),
        ("newer", note(S.DOWN, 5, "theirs")),
        ("missing", note(S.DOWN, 5, "theirs")),
        ("other", note(S.OUT_OF_SERVICE, 5, "theirs")),  # another status than ours
        ("absent", note(S.DOWN, 5, "theirs")),  # no override here
    ]
    assert ["older", "missing"] == notes.take(theirs, overrides)
    assert {"older": "theirs", "newer": "ours", "missing": "theirs"} == {
        iid: n.reason for iid, n in notes.in_force(overrides)
    }


def test_a_peers_note_of_the_same_time_is_not_taken():
    """Two notes set at the same millisecond: each node keeps its own (taking the other's
    would swap them back and forth on every round, written each time)."""
    notes = OverrideNotes()
    notes.note("i-1", note(S.DOWN, 5, "ours"))
    assert [] == notes.take([("i-1", note(S.DOWN, 5, "theirs"))], {"i-1": S.DOWN})
    assert [("i-1", note(S.DOWN, 5, "ours"))] == list(notes.in_force({"i-1": S.DOWN}))


def test_the_peers_document_reads_back_and_skips_what_does_not_read():
    notes = OverrideNotes()
    notes.note("i-1", note(S.DOWN, 5))
    notes.note("gone", note(S.DOWN, 5))  # its override is no longer in force
    listed = notes_document(notes, {"i-1": S.DOWN})
    garbage = [None, {"id": "x", "status": "SIDEWAYS", "overrideSetAt": 1}, {"id": "y"}]
    assert [("i-1", note(S.DOWN, 5))] == notes_from_document([*listed, *garbage])
    assert [] == notes_from_document("not a list")


def registry_holding_i1() -> Registry:
    registry = Registry()
    registry.register(make("i-1", "ORDERS", dirty=T0), now_ms=T0)
    return registry


def decide(registry: Registry, status: InstanceStatus | None, now_ms: int) -> None:
    """An admin's call on this node."""
    if status is None:
        registry.delete_status_override("ORDERS", "i-1", now_ms=now_ms)
    else:
        why = note(status, now_ms)
        registry.set_status_override("ORDERS", "i-1", status, now_ms=now_ms, note=why)


def pull(registry: Registry, peer: Registry) -> None:
    """What anti-entropy takes of the peer's overrides."""
    notes = peer.overrides.notes
    registry.merge_overrides(notes.in_force(peer.overrides), notes.removals(), now_ms=T0 + 10)


def test_decisions_dated_alike_on_two_nodes_end_alike_on_both():
    """Admins on three nodes decide at the same millisecond by their clocks: whichever pulls
    from whichever, all end with the same decision (a set over a removal, then the greater
    status), never each its own."""
    outcomes = set()
    for order in itertools.permutations([S.OUT_OF_SERVICE, S.DOWN, None]):
        nodes = [registry_holding_i1() for _ in order]
        for registry, status in zip(nodes, order, strict=True):
            decide(registry, status, T0 + 5)
        for registry, peer in itertools.permutations(nodes, 2):
            pull(registry, peer)
        outcomes.update(registry.overrides.get("i-1") for registry in nodes)
    assert {S.OUT_OF_SERVICE} == outcomes


def test_an_admins_call_is_dated_after_the_nodes_last_word():
    """A call in the millisecond of the one before, or after taking a peer's decision dated
    ahead by its clock, is dated just after: it is the latest decision on every node."""
    here, peer = registry_holding_i1(), registry_holding_i1()
    decide(here, S.OUT_OF_SERVICE, T0 + 5)
    decide(here, S.DOWN, T0 + 5)  # the same millisecond
    assert T0 + 6 == here.overrides.note_of("i-1").set_ms  # type: ignore[union-attr]
    decide(peer, S.OUT_OF_SERVICE, T0 + 9_000)  # its clock is ahead
    pull(here, peer)
    decide(here, None, T0 + 7)  # later, by a clock behind
    assert T0 + 9_001 == here.overrides.notes.removed_at("i-1")
    pull(peer, here)
    assert ({}, {}) == (dict(here.overrides), dict(peer.overrides))


ACT = OverrideAction
A = "ORDERS"


def told(overrides: Overrides) -> list[OverrideChange]:
    changes: list[OverrideChange] = []
    overrides.listen(changes.append)
    return changes


class TestNotes:
    def test_a_note_set_again_forgets_the_removal_before_it(self):
        notes = OverrideNotes()
        notes.removed("i-1", A, 5)
        notes.removed("i-2", A, 5)
        notes.note("i-1", note(S.DOWN, 7))
        assert (None, 5) == (notes.removed_at("i-1"), notes.removed_at("i-2"))
        assert [("i-2", A, 5)] == list(notes.removals())

    def test_the_latest_removal_is_kept(self):
        notes = OverrideNotes()
        notes.note("i-1", note(S.DOWN, 1))
        notes.removed("i-1", A, 9)
        assert [] == list(notes.in_force({"i-1": S.DOWN}))  # its note went with it
        notes.removed("i-1", "OTHER", 5)
        notes.removed("i-1", "OTHER", 9)
        assert [("i-1", A, 9)] == list(notes.removals())
        notes.removed("i-1", "LATER", 10)
        assert [("i-1", "LATER", 10)] == list(notes.removals())

    def test_removals_are_purged_before_the_retention_alone(self):
        notes = OverrideNotes()
        for iid, at_ms in (("a", 4), ("b", 5), ("c", 3), ("d", 6)):
            notes.removed(iid, A, at_ms)
        assert 2 == notes.purge_removals(before_ms=5)
        assert [("b", A, 5), ("d", A, 6)] == list(notes.removals())
        assert (None, 5) == (notes.removed_at("a"), notes.removed_at("b"))

    def test_an_override_expires_at_its_expiry_and_a_changed_one_loses_its_note(self):
        notes = OverrideNotes()
        notes.note("due", Note(A, S.DOWN, None, 1, 10))
        notes.note("later", Note(A, S.DOWN, None, 1, 11))
        notes.note("never", Note(A, S.DOWN, None, 1, None))
        notes.note("changed", Note(A, S.DOWN, None, 1, 5))
        overrides = {"due": S.DOWN, "later": S.DOWN, "never": S.DOWN, "changed": S.UP}
        assert ["due"] == [iid for iid, _ in notes.expired(overrides, 10)]
        assert None is notes.of("changed", S.DOWN)
        assert ["due", "later"] == [iid for iid, _ in notes.expired(overrides, 11)]

    def test_a_forgotten_note_is_gone_for_every_status(self):
        notes = OverrideNotes()
        notes.note("i-1", note(S.DOWN, 1))
        notes.note("i-2", note(S.DOWN, 1))
        notes.forget("i-1")
        assert (None, note(S.DOWN, 1)) == (notes.of("i-1", S.DOWN), notes.of("i-2", S.DOWN))


class TestOverrides:
    def test_it_reads_as_a_mapping_of_the_overrides_in_force(self):
        overrides = Overrides()
        overrides.set(A, "i-1", S.DOWN, None, at_ms=1)
        overrides.set(A, "i-2", S.OUT_OF_SERVICE, None, at_ms=1)
        assert (S.DOWN, 2, ["i-1", "i-2"]) == (overrides["i-1"], len(overrides), list(overrides))
        assert ("i-1" in overrides, "i-3" in overrides) == (True, False)
        assert S.OUT_OF_SERVICE is overrides.get("i-2")

    def test_the_latest_word_on_an_override_decides_what_is_older(self):
        """Set with a note at 10, removed at 20: the same decision at that time is not newer,
        a later one is, and at the same time a set beats a removal, then the greater status;
        a last word without a known time (no note, nothing removed) is older than any."""
        overrides = Overrides()
        overrides.set(A, "noted", S.DOWN, Note(A, S.DOWN, None, 10, None), at_ms=10)
        overrides.set(A, "bare", S.DOWN, None, at_ms=10)
        overrides.remove(A, "gone", ACT.DELETED, now_ms=20, at_ms=20)
        assert [False, True] == [overrides.older_than("noted", at, S.DOWN) for at in (10, 11)]
        assert [False, True] == [overrides.older_than("gone", at, None) for at in (20, 21)]
        assert (False, True) == (
            overrides.older_than("noted", 10, None),
            overrides.older_than("noted", 10, S.OUT_OF_SERVICE),
        )
        assert overrides.older_than("gone", 20, S.DOWN)
        assert not overrides.older_than("noted", 9, S.OUT_OF_SERVICE)
        assert overrides.older_than("bare", 0, None)
        assert overrides.older_than("never", 0, None)

    def test_a_set_without_a_note_drops_a_note_of_another_status_for_good(self):
        overrides = Overrides()
        noted = Note(A, S.DOWN, "why", 1, None)
        overrides.set(A, "i-1", S.DOWN, noted, at_ms=1)
        overrides.set(A, "i-1", S.DOWN, None, at_ms=2)  # the same status: its note stays
        assert noted == overrides.note_of("i-1")
        overrides.set(A, "i-1", S.OUT_OF_SERVICE, None, at_ms=3)
        overrides.set(A, "i-1", S.DOWN, None, at_ms=4)
        assert None is overrides.note_of("i-1")

    def test_every_change_is_told_with_the_override_and_note_in_force(self):
        overrides = Overrides()
        changes = told(overrides)
        noted = Note(A, S.DOWN, "why", 1, None, "ops")
        overrides.set(A, "i-1", S.DOWN, noted, at_ms=2, by="ops")
        assert S.DOWN is overrides.remove(A, "i-1", ACT.EXPIRED, now_ms=4, at_ms=3, by="clock")
        assert None is overrides.remove(A, "i-1", ACT.DELETED, now_ms=5, at_ms=5)
        assert [
            OverrideChange(ACT.SET, A, "i-1", S.DOWN, 2, noted, "ops"),
            OverrideChange(ACT.EXPIRED, A, "i-1", None, 4, None, "clock"),
        ] == changes
        # Remembered, with its application, though none was in force.
        assert [("i-1", A, 5)] == list(overrides.notes.removals())

    def test_a_copys_override_is_taken_only_where_none_is_held_or_removed(self):
        overrides = Overrides()
        changes = told(overrides)
        overrides.set(A, "held", S.DOWN, None, at_ms=1)
        overrides.remove(A, "removed", ACT.DELETED, now_ms=1, at_ms=1)
        assert not overrides.take(A, "held", S.OUT_OF_SERVICE, 2)
        assert not overrides.take(A, "removed", S.OUT_OF_SERVICE, 2)
        assert overrides.take(A, "new", S.OUT_OF_SERVICE, 3)
        assert {"held": S.DOWN, "new": S.OUT_OF_SERVICE} == dict(overrides)
        assert OverrideChange(ACT.SET, A, "new", S.OUT_OF_SERVICE, 3) == changes[-1]
        assert 2 == len(changes)

    def test_a_peers_notes_taken_are_told_as_of_when_they_were_set(self):
        overrides = Overrides()
        overrides.set("BILLING", "i-1", S.DOWN, None, at_ms=1)
        changes = told(overrides)
        theirs = Note("BILLING", S.DOWN, "why", 7, None, "ops")
        assert ["i-1"] == overrides.take_notes([("i-1", theirs), ("i-2", theirs)])
        assert [OverrideChange(ACT.SET, "BILLING", "i-1", S.DOWN, 7, theirs, "ops")] == changes

    def test_what_expired_is_listed(self):
        overrides = Overrides()
        noted = Note(A, S.DOWN, None, 1, 5)
        overrides.set(A, "i-1", S.DOWN, noted, at_ms=1)
        assert ([], [("i-1", noted)]) == (overrides.expired(4), overrides.expired(5))

    def test_a_restore_tells_no_one(self):
        overrides = Overrides()
        changes = told(overrides)
        noted = Note(A, S.DOWN, None, 3, None)
        overrides.restore({"i-1": S.DOWN}, [("i-1", noted)], [("i-2", A, 4)])
        assert ({"i-1": S.DOWN}, noted, [("i-2", A, 4)]) == (
            dict(overrides),
            overrides.note_of("i-1"),
            list(overrides.notes.removals()),
        )
        assert [] == changes
