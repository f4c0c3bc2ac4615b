"""Which of a peer's instances start-up sync and anti-entropy take (peers.merge)."""

from __future__ import annotations

from typing import Any

from peers import merge
from registry.codec import instance_from_wire, json_codec
from registry.core.model import InstanceStatus, Lease
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from tests.factories import T0, make
from tests.helpers import instance_doc

S = InstanceStatus


def peer_copy(iid: str = "i-1", *, renewed_ms: int = T0, **fields: Any) -> dict[str, Any]:
    """An instance as a peer's `GET apps/ORDERS` shows it."""
    instance = instance_from_wire(instance_doc(iid=iid, **fields), now_ms=T0)
    lease = Lease(
        instance=instance, duration_ms=90_000, registration_ms=T0, last_renewal_ms=renewed_ms
    )
    return json_codec.instance_dict(lease)


def app(*instances: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "ORDERS", "instance": list(instances)}]


async def test_missing_instances_are_copied_with_their_renewal_time():
    """An instance only the peer holds is adopted; its lease keeps the peer's last renewal."""
    registry = Registry()
    adopted = await merge.merge(registry, app(peer_copy(renewed_ms=T0 - 30_000)), now_ms=T0)
    assert (1, T0 - 30_000) == (adopted, registry.get("ORDERS", "i-1", now_ms=T0).last_renewal_ms)


async def test_dead_copies_are_not_brought_back():
    """A copy whose lease has run out on the peer is left alone."""
    registry = Registry()
    assert 0 == await merge.merge(registry, app(peer_copy(renewed_ms=T0 - 91_000)), now_ms=T0)


async def test_an_instance_cancelled_here_stays_gone():
    """A cancel that the peer missed is not undone by pulling from that peer, even when the
    peer's copy was renewed after it within the margin; a copy renewed clearly later, or
    registered again with a newer lastDirtyTimestamp, wins."""
    registry = Registry(removal_margin_ms=10_000)
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 10)
    assert 0 == await merge.merge(registry, app(peer_copy()), now_ms=T0 + 20)
    skewed = app(peer_copy(renewed_ms=T0 + 9_000))  # a clock ahead by up to the margin
    assert 0 == await merge.merge(registry, skewed, now_ms=T0 + 20)
    renewed = app(peer_copy(renewed_ms=T0 + 10_011))
    assert 1 == await merge.merge(registry, renewed, now_ms=T0 + 20_000)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 30_000)
    again = app(peer_copy(renewed_ms=T0 + 29_000, lastDirtyTimestamp=str(T0 + 29_000)))
    assert 1 == await merge.merge(registry, again, now_ms=T0 + 30_000)


async def test_a_peers_removal_removes_our_older_copy_and_is_remembered():
    """Removals listed by the peer come first: our copy renewed before the removal goes, one
    registered again since stays, and the removal of an instance we never held is kept."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    registry.register(
        instance_from_wire(instance_doc(iid="i-2", lastDirtyTimestamp=str(T0 + 7)), now_ms=T0),
        now_ms=T0,
    )
    removed = [Tombstone("ORDERS", iid, T0, T0 + 5) for iid in ("i-1", "i-2", "i-3")]
    assert 1 == await merge.merge(registry, [], now_ms=T0 + 6, removed=removed)
    assert ["i-2"] == [lease.instance.instance_id for lease in registry.application("ORDERS")]
    assert {"i-1", "i-3"} == {t.instance_id for t in registry.tombstones}


async def test_newer_dirty_timestamp_wins_in_both_directions():
    """The peer's newer copy is taken; an older one is not."""
    registry = Registry()
    registry.register(
        instance_from_wire(instance_doc(lastDirtyTimestamp=str(T0 + 5)), now_ms=T0), now_ms=T0
    )
    older = app(peer_copy(lastDirtyTimestamp=str(T0), status="DOWN"))
    assert 0 == await merge.merge(registry, older, now_ms=T0)
    newer = app(peer_copy(lastDirtyTimestamp=str(T0 + 9), status="DOWN"))
    assert 1 == await merge.merge(registry, newer, now_ms=T0)
    assert S.DOWN is registry.get("ORDERS", "i-1", now_ms=T0).instance.status


def digest_answer(
    notes: list[tuple[str, str, int]], removed: list[tuple[str, int]]
) -> dict[str, Any]:
    """A peer's digest answer listing overrides (id, status, set at) and removals (id, at)."""
    return {
        "overrideNotes": [
            {"id": iid, "appName": "ORDERS", "status": status, "overrideSetAt": at}
            for iid, status, at in notes
        ],
        "overridesRemoved": [
            {"id": iid, "appName": "ORDERS", "removedAt": at} for iid, at in removed
        ],
    }


async def test_a_copy_that_changed_later_never_undoes_an_override():
    """Same lastDirtyTimestamp, no override there, updated later (a re-registration on a node
    that was cut off): the admin's override here stays."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    note = Note("ORDERS", S.OUT_OF_SERVICE, None, T0 + 10, None)
    registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 10, note=note)
    copy = peer_copy()
    copy["lastUpdatedTimestamp"] = str(T0 + 50)
    assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 60)
    assert S.OUT_OF_SERVICE is registry.get("ORDERS", "i-1", now_ms=T0 + 60).instance.status


def test_the_later_of_two_admin_decisions_wins_on_both_sides():
    """An override set here and one removed there, or the other way round: each node takes
    the peer's decision only when it is later than its own."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    assert 1 == merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", T0 + 50)], []), now_ms=T0 + 60
    )
    assert S.OUT_OF_SERVICE is registry.get("ORDERS", "i-1", now_ms=T0 + 60).instance.status
    older_removal = digest_answer([], [("i-1", T0 + 40)])
    assert 0 == merge.take_overrides(registry, older_removal, now_ms=T0 + 60)
    later_removal = digest_answer([], [("i-1", T0 + 70)])
    assert 1 == merge.take_overrides(registry, later_removal, now_ms=T0 + 80)
    assert {} == dict(registry.overrides)
    older_set = digest_answer([("i-1", "DOWN", T0 + 60)], [])
    assert 0 == merge.take_overrides(registry, older_set, now_ms=T0 + 80)


async def test_unreadable_copies_are_skipped():
    """A broken instance in the peer's document does not stop the others."""
    registry = Registry()
    broken = {"instanceId": "i-1", "hostName": ["not", "a", "name"]}
    assert 1 == await merge.merge(registry, app(broken, peer_copy("i-2")), now_ms=T0)


def test_a_peers_decision_dated_beyond_the_clock_skew_is_not_taken():
    """An override set (or removed) at a time no clock has reached would win every later
    comparison on every node: a digest's such entries are left out."""
    registry = Registry(max_clock_skew_ms=300_000)
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    ahead = T0 + 60 + 300_001
    assert 0 == merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", ahead)], []), now_ms=T0 + 60
    )
    assert {} == dict(registry.overrides)
    merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", T0 + 50)], []), now_ms=T0 + 60
    )
    assert 0 == merge.take_overrides(registry, digest_answer([], [("i-1", ahead)]), now_ms=T0 + 60)
    assert S.OUT_OF_SERVICE is dict(registry.overrides)["i-1"]


def test_a_peers_holds_are_taken_for_copies_shown_down():
    """A copy taken from a peer at start-up comes without its hold: the peer's digest lists
    it, and it is taken where the copy is DOWN here too and asks for a check (then the
    check's recovery releases it on whichever node checks it)."""
    registry = Registry()
    checked = {"registry.check": "tcp"}
    registry.register(make("i-1", metadata=checked), now_ms=T0)
    down = InstanceStatus.DOWN
    registry.register(make("i-2", status=down, metadata=checked), now_ms=T0, is_replication=True)
    registry.register(make("i-3", status=down), now_ms=T0, is_replication=True)
    held = {"claim": "UP", "since": T0, "detail": "HTTP 503"}
    holds = {"i-1": held, "i-2": held, "i-3": held, "gone": held, "bad": {"claim": 1}}
    # i-1 shows UP here; nothing would ever check i-3, nor release it: neither is taken.
    assert 1 == merge.take_check_holds(registry, {"checkHolds": holds})
    assert ["i-2"] == [iid for iid, _ in registry.checks.items()]
    registry.check_passed("ORDERS", "i-2", now_ms=T0 + 1)
    assert InstanceStatus.UP is registry.get("ORDERS", "i-2", now_ms=T0).instance.status


def test_a_release_missed_here_is_taken_from_the_node_that_checks():
    """The checking node's digest says the instance is free: held here still (its release
    item was lost), it is released, here alone."""
    registry = Registry()
    registry.register(make("i-1", metadata={"registry.check": "tcp"}), now_ms=T0)
    registry.check_failed("ORDERS", "i-1", "refused", now_ms=T0 + 1)
    held_there = {"checkVerdicts": {"i-1": {"app": "ORDERS", "held": True}}}
    assert 0 == merge.take_check_releases(registry, held_there, now_ms=T0 + 2)
    free = {"checkVerdicts": {"i-1": {"app": "ORDERS", "held": False}, "x": "garbage"}}
    assert 1 == merge.take_check_releases(registry, free, now_ms=T0 + 2)
    assert "i-1" not in registry.checks
    assert InstanceStatus.UP is registry.get("ORDERS", "i-1", now_ms=T0).instance.status
