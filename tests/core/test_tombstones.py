"""Removals that are remembered (registry/core/tombstones.py): the rule, the registry's commands
that consult it, and the store that keeps tombstones through a restart."""

from __future__ import annotations

import pytest

from registry.core.conflicts import RemovedHere, StaleReplica
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone, Tombstones, copy_wins
from registry.errors import UnknownInstance
from registry.reads.journal import DeltaJournal
from registry.store.restore import restore
from registry.store.sqlite import Store
from tests.factories import T0, make

MARGIN = 10_000
HOUR = 3_600_000


def removal(iid: str = "i-1", dirty: int = T0, at: int = T0 + 60_000) -> Tombstone:
    return Tombstone("ORDERS", iid, dirty, at)


class TestRule:
    def test_a_newer_last_dirty_timestamp_decides_either_way(self):
        """A re-registration with newer data wins; a stale copy of what was removed loses,
        however recently renewed."""
        assert copy_wins(T0 + 1, T0, removal(), MARGIN)
        assert not copy_wins(T0 - 1, T0 + HOUR, removal(dirty=T0), MARGIN)

    def test_the_same_last_dirty_timestamp_needs_a_renewal_clearly_after(self):
        """Renewed within the margin after the removal (clocks that disagree a little): the
        removal wins; renewed later than that: the copy."""
        assert not copy_wins(T0, T0 + 60_000, removal(), MARGIN)
        assert not copy_wins(T0, T0 + 70_000, removal(), MARGIN)
        assert copy_wins(T0, T0 + 70_001, removal(), MARGIN)


class TestTombstones:
    def test_the_removal_that_says_more_is_kept(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal(dirty=T0 + 5, at=T0 + 1))
        assert removal(dirty=T0 + 5, at=T0 + 1) == held.put(removal(dirty=T0, at=T0 + 9))
        assert removal(dirty=T0 + 5, at=T0 + 9) == held.put(removal(dirty=T0 + 5, at=T0 + 9))
        assert 1 == len(held)

    def test_purged_at_their_retention_not_before(self):
        """Each removal goes a retention after its time; one replaced by a later removal of
        the same instance stays as long as the later one."""
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal("a", at=T0))
        held.put(removal("b", at=T0))
        held.put(removal("b", at=T0 + 30_000))
        assert 0 == held.purge(now_ms=T0 + HOUR)
        assert 1 == held.purge(now_ms=T0 + HOUR + 1)
        assert ["b"] == [t.instance_id for t in held]
        assert 1 == held.purge(now_ms=T0 + HOUR + 30_001)
        assert 0 == len(held)

    def test_a_purge_stops_at_its_limit_and_the_next_takes_the_rest(self):
        """The server purges in slices (a limit a call), oldest first."""
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        for n, at in enumerate((T0 + 2, T0, T0 + 1)):
            held.put(removal(f"i-{n}", at=at))
        assert 0 == held.purge(now_ms=T0 + 2 * HOUR, limit=0)
        assert 2 == held.purge(now_ms=T0 + 2 * HOUR, limit=2)
        assert ["i-0"] == [t.instance_id for t in held]
        assert 1 == held.purge(now_ms=T0 + 2 * HOUR, limit=2)
        assert 0 == len(held)

    def test_lifting_what_was_never_removed_changes_nothing(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal("i-1"))
        held.touched()
        assert (None, None) == (held.lift("ORDERS", "i-2"), held.lift("BILLING", "i-1"))
        assert (1, set()) == (len(held), held.touched())

    def test_an_application_goes_with_its_last_removal(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal("i-1"))
        held.put(removal("i-2"))
        assert removal("i-1") == held.lift("ORDERS", "i-1")
        assert (["ORDERS"], [removal("i-2")]) == (
            list(held.application_names()),
            list(held.of("ORDERS")),
        )
        held.lift("ORDERS", "i-2")
        assert ([], [], None) == (
            list(held.application_names()),
            list(held.of("ORDERS")),
            held.get("ORDERS", "i-2"),
        )

    def test_a_removal_that_says_less_touches_nothing(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal(dirty=T0 + 5))
        held.touched()
        held.put(removal(dirty=T0))
        assert (set(), 1) == (held.touched(), len(held))

    def test_of_two_removals_saying_as_much_the_last_received_is_kept(self):
        """The same lastDirtyTimestamp and time: the removal received last replaces the one
        held (an eviction's record by a cancel's, and back), and its application is touched."""
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        evicted = Tombstone("ORDERS", "i-1", T0, T0 + 60_000, expired=True)
        held.put(evicted)
        held.touched()
        assert removal() == held.put(removal())
        assert ({"ORDERS"}, removal()) == (held.touched(), held.get("ORDERS", "i-1"))
        held.put(evicted)
        assert (evicted, 1) == (held.get("ORDERS", "i-1"), len(held))

    def test_the_margin_is_the_one_given(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=5_000)
        assert not held.copy_wins(T0, T0 + 65_000, removal())
        assert held.copy_wins(T0, T0 + 65_001, removal())

    def test_touched_applications_are_told_once(self):
        held = Tombstones(retention_ms=HOUR, margin_ms=MARGIN)
        held.put(removal())
        held.lift("ORDERS", "i-1")
        assert {"ORDERS"} == held.touched()
        assert set() == held.touched()


@pytest.fixture
def registry() -> Registry:
    return Registry(removal_margin_ms=MARGIN, tombstone_retention_ms=HOUR)


class TestRegistry:
    def test_a_cancel_and_an_eviction_leave_tombstones(self, registry):
        """A cancel records its time; an eviction the last renewal it saw, and that it was an
        eviction (for peers, evidence rather than an order)."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", dirty=T0 + 1), now_ms=T0)
        registry.renew("ORDERS", "b", T0 + 30_000)
        registry.cancel("ORDERS", "a", now_ms=T0 + 5)
        assert registry.evict("ORDERS", "b", now_ms=T0 + 200_000)
        assert removal("a", T0, T0 + 5) == registry.tombstones.get("ORDERS", "a")
        evicted = Tombstone("ORDERS", "b", T0 + 1, T0 + 30_000, expired=True)
        assert evicted == registry.tombstones.get("ORDERS", "b")

    def test_a_peers_copy_of_a_removed_instance_is_refused(self, registry):
        """Replicated or adopted, a copy that loses to the removal does not come back; the
        instance's own client registering again always does, and the tombstone goes."""
        registry.register(make(), now_ms=T0)
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 5)
        with pytest.raises(RemovedHere):
            registry.register(make(), now_ms=T0 + 6, is_replication=True)
        assert not registry.adopt(make(), now_ms=T0 + 6, last_renewal_ms=T0 + 6)
        assert 0 == len(registry)
        registry.register(make(), now_ms=T0 + 7)
        assert (1, 0) == (len(registry), len(registry.tombstones))

    def test_a_peers_cancel_loses_to_our_newer_copy(self, registry):
        """Our copy registered again with newer data: the peer's cancel is answered with it
        (StaleReplica) and nothing goes; an older copy goes, remembered as the peer removed it."""
        registry.register(make(dirty=T0 + 9), now_ms=T0)
        with pytest.raises(StaleReplica):
            registry.cancel("ORDERS", "i-1", now_ms=T0 + 1, is_replication=True, removal=removal())
        registry.cancel(
            "ORDERS", "i-1", now_ms=T0 + 1, is_replication=True, removal=removal(dirty=T0 + 9)
        )
        assert removal(dirty=T0 + 9) == registry.tombstones.get("ORDERS", "i-1")

    def test_a_peers_cancel_of_an_instance_not_held_is_remembered(self, registry):
        """A cancel that overtook its registration: the registration then loses to it."""
        with pytest.raises(UnknownInstance):
            registry.cancel("ORDERS", "i-1", now_ms=T0, is_replication=True, removal=removal())
        with pytest.raises(RemovedHere):
            registry.register(make(), now_ms=T0 + 1, is_replication=True, last_renewal_ms=T0)

    def test_bury_removes_what_the_removal_wins_over(self, registry):
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0 + 90_000)  # renewed well after the removal
        assert registry.bury(removal("a"), now_ms=T0 + 90_000)
        assert not registry.bury(removal("b"), now_ms=T0 + 90_000)
        assert ["b"] == [lease.instance.instance_id for lease in registry.leases()]

    def test_restored_leases_keep_their_renewal_and_get_a_grace(self, registry):
        """A restored lease is not evicted within a duration of the restart, but its last
        renewal stays the stored one: a peer's later removal wins over it."""
        registry.load([make("a"), make("b")], now_ms=T0 + HOUR, renewals=[T0, T0])
        lease = registry.get("ORDERS", "a", now_ms=T0 + HOUR + 89_000)
        assert T0 == lease.last_renewal_ms
        assert not registry.evict("ORDERS", "a", now_ms=T0 + HOUR + 90_000)
        assert registry.evict("ORDERS", "a", now_ms=T0 + HOUR + 90_001)
        assert registry.bury(removal("b", at=T0 + 1), now_ms=T0 + HOUR + 1)


class TestStore:
    async def test_tombstones_survive_a_restart(self, registry, writer):
        """Written with the row's deletion; read back before the instances, so a restarted
        node refuses a peer's stale copy at once; gone again once the instance is back."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.renew("ORDERS", "b", T0 + 20_000)
        await writer.flush()
        registry.cancel("ORDERS", "a", now_ms=T0 + 5)
        registry.register(make("b"), now_ms=T0 + 25_000)
        await writer.flush()
        store = await Store.open(writer.path, now_ms=T0)
        try:
            snapshot = await store.load()
        finally:
            await store.close()
        assert [removal("a", T0, T0 + 5)] == snapshot.tombstones
        assert [T0 + 25_000] == snapshot.renewals
        again = Registry(removal_margin_ms=MARGIN)
        restore(again, DeltaJournal(retention_ms=1), snapshot, now_ms=T0 + HOUR)
        with pytest.raises(RemovedHere):
            again.register(make("a"), now_ms=T0 + HOUR, is_replication=True, last_renewal_ms=T0)
        assert T0 + 25_000 == again.get("ORDERS", "b", now_ms=T0 + HOUR).last_renewal_ms
        registry.register(make("a", dirty=T0 + 6), now_ms=T0 + 30_000)
        await writer.flush()
        store = await Store.open(writer.path, now_ms=T0)
        try:
            assert [] == (await store.load()).tombstones
        finally:
            await store.close()

    async def test_tombstones_are_purged_at_their_retention(self, registry, writer):
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.cancel("ORDERS", "a", now_ms=T0 + 5)
        registry.cancel("ORDERS", "b", now_ms=T0 + HOUR)
        await writer.flush()
        await writer.forget_tombstones(before_ms=T0 + 6)
        store = await Store.open(writer.path, now_ms=T0)
        try:
            assert ["b"] == [t.instance_id for t in (await store.load()).tombstones]
        finally:
            await store.close()
