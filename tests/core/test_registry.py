"""The registry core: commands, their events, and Eureka's status and timestamp rules."""

from __future__ import annotations

import dataclasses

import pytest

from registry.core.conflicts import StaleReplica
from registry.core.model import (
    ActionType,
    InstanceStatus,
)
from registry.core.overrides import Note, OverrideChange
from registry.core.registry import Registry
from registry.errors import LimitReached, UnknownInstance
from tests.factories import T0, make
from tests.helpers import evict_expired
from tests.recorders import Changes, OverrideChanges

S = InstanceStatus


@pytest.fixture
def events() -> Changes:
    return Changes()


@pytest.fixture
def registry(events: Changes) -> Registry:
    r = Registry()
    r.subscribe(events)
    return r


def hand_over_override(registry: Registry, status: S) -> None:
    """A peer's heartbeat with newer data and an override: stored, and answered 404."""
    with pytest.raises(UnknownInstance):
        registry.renew(
            "ORDERS",
            "i-1",
            now_ms=T0 + 1,
            last_dirty_ms=T0 + 5,
            is_replication=True,
            overridden_status=status,
        )


def status_of(registry: Registry, iid: str = "i-1", app: str = "ORDERS") -> S:
    return registry.get(app, iid, now_ms=T0).instance.status


class TestRegister:
    def test_new_instance_gets_a_lease_and_an_added_event(self, registry, events):
        """A first registration creates a lease stamped now and emits ADDED with index 1."""
        registry.register(make(), now_ms=T0 + 5)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 5)
        assert (T0 + 5, T0 + 5, T0 + 5) == (
            lease.registration_ms,
            lease.last_renewal_ms,
            lease.service_up_ms,
        )
        assert ActionType.ADDED == lease.instance.action_type
        assert T0 + 5 == lease.instance.last_updated_ms
        assert [(ActionType.ADDED, 1)] == [(e.action, e.index) for e in events]

    def test_service_up_is_kept_across_re_registration(self, registry):
        """Re-registering restarts the lease but keeps when the instance first came UP."""
        registry.register(make(status=S.STARTING), now_ms=T0)
        assert 0 == registry.get("ORDERS", "i-1", now_ms=T0).service_up_ms
        registry.register(make(dirty=T0 + 1), now_ms=T0 + 10)
        registry.register(make(dirty=T0 + 2), now_ms=T0 + 20)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 20)
        assert (T0 + 10, T0 + 20) == (lease.service_up_ms, lease.registration_ms)

    def test_older_data_does_not_replace_newer(self, registry):
        """An incoming instance with an older lastDirtyTimestamp keeps the stored one."""
        registry.register(make(dirty=T0 + 100, metadata={"v": "new"}), now_ms=T0)
        registry.register(make(dirty=T0, metadata={"v": "old"}), now_ms=T0 + 1)
        assert {"v": "new"} == registry.get("ORDERS", "i-1", now_ms=T0).instance.metadata

    def test_lease_duration_is_the_one_asked_for_by_the_call(self, registry):
        """Even when older data is dropped, the new lease lasts what this call asked for."""
        registry.register(make(dirty=T0 + 100), now_ms=T0)
        registry.register(make(dirty=T0, duration_secs=10), now_ms=T0)
        assert 10_000 == registry.get("ORDERS", "i-1", now_ms=T0).duration_ms

    def test_equal_dirty_timestamps_take_the_incoming_data(self, registry):
        """On a tie the registration that arrives wins."""
        registry.register(make(metadata={"v": "first"}), now_ms=T0)
        registry.register(make(metadata={"v": "second"}), now_ms=T0 + 1)
        assert {"v": "second"} == registry.get("ORDERS", "i-1", now_ms=T0).instance.metadata

    def test_client_cannot_take_itself_out_of_service_over_an_up_lease(self, registry):
        """LeaseExists: the server's UP beats a client re-registering OUT_OF_SERVICE."""
        registry.register(make(), now_ms=T0)
        registry.register(make(status=S.OUT_OF_SERVICE), now_ms=T0 + 1)
        assert S.UP == status_of(registry)

    def test_peer_registration_is_taken_as_sent(self, registry):
        """Replicated registrations skip LeaseExists: the peer's status stands."""
        registry.register(make(), now_ms=T0)
        registry.register(make(status=S.OUT_OF_SERVICE), now_ms=T0 + 1, is_replication=True)
        assert S.OUT_OF_SERVICE == status_of(registry)

    def test_override_survives_re_registration(self, registry):
        """An admin override beats the UP a client registers with."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 1)
        registry.register(make(dirty=T0 + 50), now_ms=T0 + 2)
        instance = registry.get("ORDERS", "i-1", now_ms=T0 + 2).instance
        assert (S.OUT_OF_SERVICE, S.OUT_OF_SERVICE) == (instance.status, instance.overridden_status)

    def test_down_claim_beats_an_override(self, registry):
        """DownOrStarting runs first: an instance reporting DOWN is DOWN despite an override."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.UP, now_ms=T0 + 1)
        registry.register(make(status=S.DOWN, dirty=T0 + 5), now_ms=T0 + 2)
        assert S.DOWN == status_of(registry)

    def test_overridden_status_in_a_registration_becomes_the_override(self, registry):
        """A registration carrying overriddenStatus (how peers hand overrides over) stores it."""
        registry.register(make(overridden_status=S.OUT_OF_SERVICE), now_ms=T0, is_replication=True)
        assert {"i-1": S.OUT_OF_SERVICE} == dict(registry.overrides)
        assert S.OUT_OF_SERVICE == status_of(registry)


class TestRenew:
    def test_renew_stores_the_time_and_emits_nothing(self, registry, events):
        """A plain heartbeat moves lastRenewalTimestamp and changes nothing else."""
        registry.register(make(), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 30_000)
        assert T0 + 30_000 == registry.get("ORDERS", "i-1", now_ms=T0).last_renewal_ms
        assert 1 == len(events)

    def test_unknown_instance_is_404(self, registry):
        """Renewing an instance without a lease fails."""
        with pytest.raises(UnknownInstance):
            registry.renew("ORDERS", "ghost", now_ms=T0)

    def test_expired_lease_can_still_be_renewed(self, registry):
        """There is no expiry check on renew: a late heartbeat revives a lease not yet evicted."""
        registry.register(make(), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 500_000)
        assert T0 + 500_000 == registry.get("ORDERS", "i-1", now_ms=T0 + 500_000).last_renewal_ms

    def test_unknown_status_forces_re_registration(self, registry):
        """After an override is deleted without a value the next heartbeat answers 404."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 1)
        before = registry.get("ORDERS", "i-1", now_ms=T0 + 1).last_renewal_ms
        with pytest.raises(UnknownInstance, match="re-register"):
            registry.renew("ORDERS", "i-1", now_ms=T0 + 2)
        assert before == registry.get("ORDERS", "i-1", now_ms=T0 + 2).last_renewal_ms

    def test_override_applied_by_a_heartbeat_is_a_modified_change(self, registry, events):
        """A heartbeat that changes the status records MODIFIED, unlike Eureka."""
        registry.register(make(), now_ms=T0)
        hand_over_override(registry, S.OUT_OF_SERVICE)  # the status is not changed yet
        assert S.UP == status_of(registry)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 2)
        assert S.OUT_OF_SERVICE == status_of(registry)
        assert ActionType.MODIFIED == events[-1].action
        assert S.OUT_OF_SERVICE == events[-1].lease.instance.status

    def test_newer_dirty_timestamp_from_caller_is_404(self, registry):
        """A caller with newer data is told to re-register; the lease was still renewed."""
        registry.register(make(), now_ms=T0)
        with pytest.raises(UnknownInstance, match="newer"):
            registry.renew("ORDERS", "i-1", now_ms=T0 + 7, last_dirty_ms=T0 + 1)
        assert T0 + 7 == registry.get("ORDERS", "i-1", now_ms=T0 + 7).last_renewal_ms

    def test_older_dirty_timestamp_from_a_client_is_fine(self, registry, events):
        """A client whose data is older than ours just gets its 200: the lease is renewed, and
        our newer data stays, unchanged."""
        registry.register(make(dirty=T0 + 10), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 1, last_dirty_ms=T0)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 1)
        assert (T0 + 1, T0 + 10) == (lease.last_renewal_ms, lease.instance.last_dirty_ms)
        assert [ActionType.ADDED] == [e.action for e in events]

    def test_older_dirty_timestamp_from_a_peer_is_409_with_our_copy(self, registry):
        """A peer with older data gets a conflict carrying our instance."""
        registry.register(make(dirty=T0 + 10), now_ms=T0)
        with pytest.raises(StaleReplica) as caught:
            registry.renew("ORDERS", "i-1", now_ms=T0 + 1, last_dirty_ms=T0, is_replication=True)
        assert T0 + 10 == caught.value.lease.instance.last_dirty_ms

    def test_peer_with_newer_data_hands_over_its_override(self, registry):
        """A replicated heartbeat with newer data and an override stores the override, then 404."""
        registry.register(make(), now_ms=T0)
        hand_over_override(registry, S.OUT_OF_SERVICE)
        assert {"i-1": S.OUT_OF_SERVICE} == dict(registry.overrides)

    def test_dirty_check_can_be_turned_off(self):
        """With sync_when_timestamp_differs off, lastDirtyTimestamp is not compared: a caller
        with newer data is renewed (no 404), and a peer with older data too (no 409)."""
        registry = Registry(sync_when_timestamp_differs=False)
        registry.register(make(dirty=T0 + 10), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 1, last_dirty_ms=T0 + 99)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 2, last_dirty_ms=T0, is_replication=True)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 2)
        assert (T0 + 2, T0 + 10) == (lease.last_renewal_ms, lease.instance.last_dirty_ms)

    def test_a_renewal_seen_on_a_stock_peer_renews_forward_only(self, registry):
        """A stock peer's registry renews our copy to its renewal when that is later than
        ours, never past our clock, never backwards, and never a cancelled lease."""
        registry.register(make(), now_ms=T0)
        assert registry.renewed_elsewhere("ORDERS", "i-1", T0 + 30_000, now_ms=T0 + 31_000)
        assert not registry.renewed_elsewhere("ORDERS", "i-1", T0 + 20_000, now_ms=T0 + 40_000)
        assert T0 + 30_000 == registry.get("ORDERS", "i-1", now_ms=T0).last_renewal_ms
        assert registry.renewed_elsewhere("ORDERS", "i-1", T0 + 99_000, now_ms=T0 + 50_000)
        assert T0 + 50_000 == registry.get("ORDERS", "i-1", now_ms=T0).last_renewal_ms
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 60_000)
        assert not registry.renewed_elsewhere("ORDERS", "i-1", T0 + 70_000, now_ms=T0 + 80_000)
        assert not registry.renewed_elsewhere("ORDERS", "ghost", T0, now_ms=T0)


class TestLeaseExpiry:
    def test_exact_expiry_by_default(self, registry):
        """A lease expires exactly `duration` after its last renewal."""
        registry.register(make(), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 30_000)
        registry.get("ORDERS", "i-1", now_ms=T0 + 120_000)
        with pytest.raises(UnknownInstance, match="expired"):
            registry.get("ORDERS", "i-1", now_ms=T0 + 120_001)

    def test_legacy_expiry_is_twice_the_duration_after_a_renewal(self):
        """Eureka's behaviour on request: renewal stamps now + duration, expiry 2 x duration."""
        registry = Registry(legacy_lease_expiry=True)
        registry.register(make(), now_ms=T0)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 30_000)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 210_000)
        assert T0 + 120_000 == lease.last_renewal_ms  # future-dated, as Eureka shows it
        with pytest.raises(UnknownInstance):
            registry.get("ORDERS", "i-1", now_ms=T0 + 210_001)

    def test_duration_comes_from_the_instance(self, registry):
        """An instance asking for a 10 s lease gets one."""
        registry.register(make(duration_secs=10), now_ms=T0)
        assert 1 == evict_expired(registry, now_ms=T0 + 10_001)

    def test_eviction_removes_only_expired_leases_and_emits_deleted(self, registry, events):
        """Eviction takes the silent instance and leaves the renewing one."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.renew("ORDERS", "b", now_ms=T0 + 60_000)
        assert 1 == evict_expired(registry, now_ms=T0 + 90_001)
        assert ["b"] == [lease.instance.instance_id for lease in registry.leases()]
        deleted = events[-1]
        assert (ActionType.DELETED, "a", T0 + 90_001) == (
            deleted.action,
            deleted.lease.instance.instance_id,
            deleted.lease.eviction_ms,
        )

    def test_eviction_grace_covers_the_evictor_lateness(self, registry):
        """Extra milliseconds (the tick's own delay) keep a just-late lease."""
        registry.register(make(), now_ms=T0)
        assert 0 == evict_expired(registry, now_ms=T0 + 95_000, extra_ms=5_000)
        assert 1 == evict_expired(registry, now_ms=T0 + 95_001, extra_ms=5_000)

    def test_eviction_keeps_the_admin_override(self, registry):
        """An evicted instance that comes back is still under its override."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0)
        evict_expired(registry, now_ms=T0 + 200_000)
        registry.register(make(dirty=T0 + 200_000), now_ms=T0 + 200_001)
        assert (
            S.OUT_OF_SERVICE == registry.get("ORDERS", "i-1", now_ms=T0 + 200_001).instance.status
        )


class TestCancel:
    def test_cancel_removes_the_lease_and_keeps_the_override(self, registry, events):
        """Cancel deletes the lease and emits DELETED; the admin's override stays in force
        for the instance's next registration (unlike Eureka), until an admin deletes it."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0)
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 3)
        assert 0 == len(registry)
        assert {"i-1": S.DOWN} == dict(registry.overrides)
        assert ActionType.DELETED == events[-1].action
        assert T0 + 3 == events[-1].lease.instance.last_updated_ms
        assert S.DOWN is registry.register(make(), now_ms=T0 + 4).status
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 5)
        assert {} == dict(registry.overrides)

    def test_the_override_of_an_instance_gone_is_kept_until_an_admin_deletes_it(self, registry):
        registry.register(make(overridden_status=S.DOWN), now_ms=T0, is_replication=True)
        evict_expired(registry, now_ms=T0 + 200_000)
        with pytest.raises(UnknownInstance):
            registry.cancel("ORDERS", "i-1", now_ms=T0 + 200_001)
        assert {"i-1": S.DOWN} == dict(registry.overrides)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 200_002)
        assert {} == dict(registry.overrides)
        with pytest.raises(UnknownInstance):  # neither an instance nor an override
            registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 200_003)

    def test_a_lapsed_lease_loses_the_override_deleted_under_it(self, registry):
        """What is kept of the instance (and written to the store) carries no override once
        it is deleted, so a restart cannot bring it back."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 90_001, status=S.UP)
        (lease,) = registry.application("ORDERS")
        assert ({}, S.UP, S.UNKNOWN) == (
            dict(registry.overrides),
            lease.instance.status,
            lease.instance.overridden_status,
        )

    def test_a_delete_naming_another_application_leaves_the_override(self, registry):
        """The override of a live instance is its own application's to delete."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0)
        with pytest.raises(UnknownInstance, match="it is in 'ORDERS'"):
            registry.delete_status_override("BILLING", "i-1", now_ms=T0 + 1)
        assert {"i-1": S.OUT_OF_SERVICE} == dict(registry.overrides)


class TestOverrideNotes:
    """What the admin said with an override is the core's: set, taken from a peer, forgotten
    with the override, and its expiry a core command on the clock's time."""

    def note(self, status: S = S.OUT_OF_SERVICE, expires_ms: int | None = T0 + 60_000) -> Note:
        return Note("ORDERS", status, "incident", T0, expires_ms, "ops")

    def test_a_note_comes_with_its_override_and_goes_with_it(self, registry):
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0, note=self.note())
        assert self.note() == registry.overrides.notes.of("i-1", S.OUT_OF_SERVICE)
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 1)  # the override and its note stay
        assert self.note() == registry.overrides.notes.of("i-1", S.OUT_OF_SERVICE)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 2)
        assert None is registry.overrides.notes.of("i-1", S.OUT_OF_SERVICE)

    def test_overrides_expire_when_their_time_comes_and_not_before(self, registry):
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0, note=self.note())
        registry.set_status_override(
            "ORDERS", "b", S.OUT_OF_SERVICE, now_ms=T0, note=self.note(expires_ms=None)
        )
        assert [] == registry.expire_due(now_ms=T0 + 59_999)
        assert [("ORDERS", "a")] == registry.expire_due(now_ms=T0 + 60_000)
        assert {"b": S.OUT_OF_SERVICE} == dict(registry.overrides)
        assert S.UNKNOWN is registry.get("ORDERS", "a", now_ms=T0 + 60_000).instance.status

    def test_a_peers_note_is_taken_for_an_override_held_here(self, registry):
        registry.register(make(overridden_status=S.OUT_OF_SERVICE), now_ms=T0, is_replication=True)
        theirs = [("i-1", self.note()), ("i-2", self.note())]
        assert ["i-1"] == registry.overrides.take_notes(theirs)
        assert self.note() == registry.overrides.notes.of("i-1", S.OUT_OF_SERVICE)


class TestOverrideChanges:
    """Every command that changes an override or its note tells the override subscribers
    what the override now is, and who acted: the store writes from these and compares
    nothing."""

    @pytest.fixture
    def changes(self, registry: Registry) -> list[OverrideChange]:
        told = OverrideChanges()
        registry.subscribe(told)
        return told

    @staticmethod
    def seen(changes: list[OverrideChange]) -> list[tuple[str, str, S | None, str | None]]:
        assert {"ORDERS"} == {c.app for c in changes}
        return [(c.action.value, c.instance_id, c.status, c.by) for c in changes]

    def test_an_admins_set_delete_and_the_cancel_under_one(self, registry, changes):
        note = Note("ORDERS", S.OUT_OF_SERVICE, "incident", T0, None, "ops")
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0, note=note)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 1)  # again
        registry.set_status_override("ORDERS", "b", S.DOWN, now_ms=T0 + 1)
        registry.cancel("ORDERS", "a", now_ms=T0 + 2, by="svc")
        registry.cancel("ORDERS", "b", now_ms=T0 + 2, by="svc")
        registry.delete_status_override("ORDERS", "a", now_ms=T0 + 3, by="ops")  # instance gone
        registry.register(make("b"), now_ms=T0 + 4)
        registry.delete_status_override("ORDERS", "b", now_ms=T0 + 5, by="ops2")
        registry.delete_status_override("ORDERS", "b", now_ms=T0 + 6, by="ops2")  # none left
        assert [
            ("set", "a", S.OUT_OF_SERVICE, "ops"),
            ("set", "a", S.OUT_OF_SERVICE, None),
            ("set", "b", S.DOWN, None),
            ("instance_cancelled", "a", S.OUT_OF_SERVICE, "svc"),
            ("instance_cancelled", "b", S.DOWN, "svc"),
            ("deleted", "a", None, "ops"),
            ("deleted", "b", None, "ops2"),
        ] == self.seen(changes)
        assert [note, note] == [c.note for c in changes[:2]]  # the note holds for the status
        assert [T0, T0 + 1, T0 + 1, T0 + 2, T0 + 2, T0 + 3, T0 + 5] == [c.at_ms for c in changes]

    def test_an_expiry_is_told_with_its_application_even_with_the_instance_gone(
        self, registry, changes
    ):
        note = Note("ORDERS", S.OUT_OF_SERVICE, None, T0, T0 + 10, "ops")
        for iid in ("a", "b"):
            registry.register(make(iid), now_ms=T0)
            registry.set_status_override("ORDERS", iid, S.OUT_OF_SERVICE, now_ms=T0, note=note)
        registry.cancel("ORDERS", "b", now_ms=T0 + 1)
        changes.clear()
        registry.expire_due(now_ms=T0 + 10)
        assert [("ORDERS", "a", "expired"), ("ORDERS", "b", "expired")] == sorted(
            (c.app, c.instance_id, c.action.value) for c in changes
        )

    def test_what_peers_hand_over(self, registry, changes):
        """An override in a peer's registration, its heartbeat with newer data, its copy
        taken back (with or without one), and its note."""
        registry.register(make("a", overridden_status=S.DOWN), now_ms=T0, is_replication=True)
        registry.register(make("a", overridden_status=S.DOWN), now_ms=T0, is_replication=True)
        registry.register(make("i-1"), now_ms=T0)
        hand_over_override(registry, S.OUT_OF_SERVICE)
        registry.adopt(make("a", dirty=T0 + 9), now_ms=T0 + 2, last_renewal_ms=T0 + 2)
        registry.adopt(
            make("c", overridden_status=S.UP, dirty=T0 + 9), now_ms=T0 + 2, last_renewal_ms=T0
        )
        note = Note("ORDERS", S.UP, "canary", T0 + 1, None, "ops")
        registry.overrides.take_notes([("c", note)])
        assert [
            ("set", "a", S.DOWN, None),
            ("set", "i-1", S.OUT_OF_SERVICE, None),
            ("set", "c", S.UP, None),
            ("set", "c", S.UP, "ops"),
        ] == self.seen(changes)
        assert (note, T0 + 1) == (changes[-1].note, changes[-1].at_ms)

    def test_a_warm_restart_tells_only_what_the_stores_table_lacks(self, registry, changes):
        """What the store gave back is on disk already; an instance row carrying an override
        the table lacks (an earlier release could leave them apart) is told, to be written."""
        note = Note("ORDERS", S.DOWN, None, T0, None)
        registry.restore({"a": S.DOWN}, 5, [("a", note)])
        registry.load(
            [
                make("a", overridden_status=S.DOWN),
                make("b", status=S.DOWN),
                make("c", status=S.OUT_OF_SERVICE, overridden_status=S.OUT_OF_SERVICE),
            ],
            now_ms=T0,
        )
        assert [("set", "c", S.OUT_OF_SERVICE, None)] == self.seen(changes)
        assert {"a": S.DOWN, "c": S.OUT_OF_SERVICE} == dict(registry.overrides)

    def test_a_note_of_another_status_does_not_come_back(self, registry, changes):
        """An override changed without a note loses its note: the status it was given for
        coming back later brings no stale reason. A peer's copy without the override takes
        neither away (overrides are decided by their own times)."""
        registry.register(make("a"), now_ms=T0)
        note = Note("ORDERS", S.OUT_OF_SERVICE, "incident", T0, T0 + 60_000, "ops")
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0, note=note)
        registry.set_status_override("ORDERS", "a", S.DOWN, now_ms=T0 + 1)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 2)
        assert None is registry.overrides.notes.of("a", S.OUT_OF_SERVICE)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 3, note=note)
        registry.adopt(make("a", dirty=T0 + 9), now_ms=T0 + 4, last_renewal_ms=T0 + 4)
        assert note == registry.overrides.notes.of("a", S.OUT_OF_SERVICE)
        assert S.OUT_OF_SERVICE is registry.get("ORDERS", "a", now_ms=T0 + 4).instance.status


class TestOverrides:
    def test_set_changes_status_holds_the_lease_and_emits_modified(self, registry, events):
        """PUT status stores the override, sets both status fields and keeps the lease alive
        for a duration from the call, without counting it as the client's renewal (which a
        peer's removal is weighed against)."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 9)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 90_009)
        assert (S.OUT_OF_SERVICE, S.OUT_OF_SERVICE, T0) == (
            lease.instance.status,
            lease.instance.overridden_status,
            lease.last_renewal_ms,
        )
        assert lease.is_expired(T0 + 90_010)
        assert (ActionType.MODIFIED, 2) == (events[-1].action, events[-1].index)

    def test_set_to_the_current_status_still_records_the_decision(self, registry):
        """Unlike Eureka, an override equal to the current status is stored."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.UP, now_ms=T0)
        assert {"i-1": S.UP} == dict(registry.overrides)

    def test_setting_the_same_override_twice_emits_once(self, registry, events):
        """Repeating an override in force changes nothing."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0 + 1)
        assert 2 == len(events)

    def test_set_adopts_a_newer_dirty_timestamp_only(self, registry):
        """lastDirtyTimestamp moves forward, never back."""
        registry.register(make(dirty=T0 + 10), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0, last_dirty_ms=T0)
        assert T0 + 10 == registry.get("ORDERS", "i-1", now_ms=T0).instance.last_dirty_ms
        registry.set_status_override("ORDERS", "i-1", S.UP, now_ms=T0, last_dirty_ms=T0 + 20)
        assert T0 + 20 == registry.get("ORDERS", "i-1", now_ms=T0).instance.last_dirty_ms

    def test_set_on_an_expired_lease_is_404(self, registry):
        """An expired lease counts as gone for admin calls."""
        registry.register(make(), now_ms=T0)
        with pytest.raises(UnknownInstance):
            registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0 + 90_001)

    def test_delete_with_value_leaves_that_status(self, registry):
        """DELETE ?value=UP removes the override and sets UP with nothing behind it."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 1, status=S.UP)
        instance = registry.get("ORDERS", "i-1", now_ms=T0 + 1).instance
        assert (S.UP, S.UNKNOWN, {}) == (
            instance.status,
            instance.overridden_status,
            dict(registry.overrides),
        )

    def test_delete_without_override_only_holds_the_lease(self, registry, events):
        """With no override in force, DELETE keeps the lease alive and changes nothing but
        the memory of the decision (an older override from a peer loses to it)."""
        registry.register(make(), now_ms=T0)
        registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 4)
        assert S.UP == status_of(registry)
        assert not registry.get("ORDERS", "i-1", now_ms=T0 + 90_004).is_expired(T0 + 90_004)
        assert (1, T0 + 4) == (len(events), registry.overrides.notes.removed_at("i-1"))


class TestMetadata:
    def test_metadata_merges_and_re_registers(self, registry, events):
        """PUT metadata merges keys and re-registers: new lease, ADDED again."""
        registry.register(make(metadata={"a": "1", "b": "2"}), now_ms=T0)
        registry.update_metadata("ORDERS", "i-1", {"b": "3", "c": "4"}, now_ms=T0 + 8)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 8)
        assert {"a": "1", "b": "3", "c": "4"} == lease.instance.metadata
        assert (T0 + 8, ActionType.ADDED) == (lease.registration_ms, events[-1].action)


class TestReads:
    def test_find_searches_every_application(self, registry):
        """instances/{id} finds the instance in whichever app holds it."""
        registry.register(make("x", app="PAYMENTS"), now_ms=T0)
        assert "PAYMENTS" == registry.find("x", now_ms=T0).instance.app

    def test_reconcile_hash_counts_statuses_alphabetically(self, registry):
        """The hash lists each status present with its count, in alphabetical order."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", status=S.DOWN), now_ms=T0)
        registry.register(make("c"), now_ms=T0)
        assert "DOWN_1_UP_2_" == registry.reconcile_hash()

    def test_emptied_application_disappears(self, registry):
        """An application whose last instance left is not listed."""
        registry.register(make(), now_ms=T0)
        registry.cancel("ORDERS", "i-1", now_ms=T0)
        assert [] == list(registry.applications())

    def test_snapshots_do_not_change_with_the_registry(self, registry, events):
        """An event's snapshot keeps the state of its moment."""
        registry.register(make(), now_ms=T0)
        registry.set_status_override("ORDERS", "i-1", S.DOWN, now_ms=T0 + 1)
        registry.renew("ORDERS", "i-1", now_ms=T0 + 2)
        assert S.UP == events[0].lease.instance.status
        assert T0 == events[0].lease.last_renewal_ms
        assert dataclasses.is_dataclass(events[0].lease)


class TestLimits:
    def test_clients_register_within_the_caps_and_peers_beyond(self):
        """max_applications and max_instances_per_application refuse a client's new
        instance past them (a registry runs out of memory otherwise); registering again, and
        a peer's registrations, are not refused (each node caps its own clients)."""
        registry = Registry(max_applications=2, max_instances_per_application=2)
        for iid, app in (("a-1", "A"), ("a-2", "A"), ("b-1", "B")):
            registry.register(make(iid, app=app), now_ms=T0)
        with pytest.raises(LimitReached, match="A has 2 instances"):
            registry.register(make("a-3", app="A"), now_ms=T0)
        with pytest.raises(LimitReached, match="max_applications"):
            registry.register(make("c-1", app="C"), now_ms=T0)
        registry.register(make("a-1", app="A"), now_ms=T0 + 1)  # again: no new instance
        registry.register(make("c-1", app="C"), now_ms=T0, is_replication=True)
        assert 4 == len(registry)
