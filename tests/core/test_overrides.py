"""Override notes: the note a peer lists is taken only for an override in force here with
the same status, and only when newer than ours; the peers' document reads back what it says."""

from __future__ import annotations

from registry.codec.notes import notes_document, notes_from_document
from registry.core.model import InstanceStatus
from registry.core.overrides import Note, OverrideNotes

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
