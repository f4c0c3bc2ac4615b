"""Override notes: the note a peer lists is taken only for an override in force here with
the same status, and only when newer than ours; the peers' document reads back what it says.
Decisions dated alike on two nodes are ordered alike on both, and an admin's call is dated
after the node's last word."""

from __future__ import annotations

import itertools

from registry.codec.notes import notes_document, notes_from_document
from registry.core.model import InstanceStatus
from registry.core.overrides import Note, OverrideNotes
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
