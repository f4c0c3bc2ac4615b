"""Self-preservation arithmetic against the contract's worked examples (contract 8), and ours."""

from __future__ import annotations

import pytest

from registry.core.preservation import (
    SelfPreservation,
    expiration_enabled,
    recount_accepted,
    renewal_threshold,
)
from registry.core.registry import Registry
from tests.factories import T0, make
from tests.helpers import evict_expired

MIN = 60_000


@pytest.mark.parametrize(
    ("clients", "threshold"),
    [
        (0, 0),  # Netflix standalone with nothing synced: T = 0, so expiry is off
        (1, 1),
        (2, 3),  # Spring standalone with one client (E = 1 + 1)
        (10, 17),
        (11, 18),  # ten clients on Spring (E = 1 + 10)
        (100, 170),
        (1000, 1700),
    ],
)
def test_threshold_is_int_of_clients_times_two_times_085(clients: int, threshold: int) -> None:
    """T = int(E x 60 / 30 x 0.85) with the default interval and percent."""
    assert threshold == renewal_threshold(clients * 60 / 30, 0.85)


@pytest.mark.parametrize(
    ("threshold", "renewals", "enabled"),
    [
        (3, 2, False),  # one Spring client: never evicted (the common confusion)
        (18, 20, True),  # ten clients renewing
        (18, 16, False),  # two of ten killed
        (17, 16, False),  # ... still off after the recount accepted E = 10
        (18, 18, False),  # R == T holds eviction
        (0, 5, False),  # T = 0 disables expiry whatever arrives
    ],
)
def test_expiration_needs_renewals_above_a_positive_threshold(
    threshold: int, renewals: int, enabled: bool
) -> None:
    assert enabled is expiration_enabled(threshold, renewals)


@pytest.mark.parametrize(
    ("counted", "expected", "accepted"),
    [
        (10, 11, True),  # 10 > 0.85 x 11 = 9.35
        (0, 11, False),  # an embedded client that fetched nothing
        (9, 11, False),  # 9 is not above 9.35
        (86, 100, True),
        (85, 100, False),  # a drop of exactly 15 % is refused (strict comparison)
        (200, 100, True),  # growth always is
    ],
)
def test_recount_refuses_drops_of_15_percent_or_more(
    counted: int, expected: int, accepted: bool
) -> None:
    assert accepted is recount_accepted(counted * 2.0, expected * 2.0, 0.85)


def registry_with(preservation: SelfPreservation) -> Registry:
    registry = Registry()
    registry.subscribe(preservation)
    return registry


def register(
    registry: Registry, count: int, *, interval: int = 30, prefix: str = "i", renew: bool = True
) -> None:
    """`count` clients registered, each renewing once (when `renew`) as a stock client does."""
    for n in range(count):
        instance = make(f"{prefix}-{n}", renewal_interval_secs=interval)
        registry.register(instance, now_ms=T0)
        if renew:
            registry.renew(instance.app, instance.instance_id, T0 + 1)


class TestWorkedExamples:
    def test_one_spring_client_is_never_evicted_by_eurekas_rule(self):
        """E starts at 1, the registration makes it 2, T = 3, and 2 renewals are not above 3."""
        sp = SelfPreservation(min_instances=0)
        register(registry_with(sp), 1)
        sp.end_minute(2)
        assert (2, 3) == (sp.expected_clients, sp.threshold)
        assert not sp.judge(1).evict

    def test_ten_clients_two_killed_stay_held_through_the_recount(self):
        """E = 11, T = 18; R = 16 holds; the recount accepts 10 (E = 10, T = 17): still held."""
        sp = SelfPreservation(min_instances=0, accept_lasting_drop=False)
        register(registry_with(sp), 10)
        assert (11, 18) == (sp.expected_clients, sp.threshold)
        sp.end_minute(20)
        assert sp.judge(10).evict
        sp.end_minute(20 + 16)
        assert not sp.judge(10).evict
        sp.recount(now=900, now_ms=T0 + 900_000, renewing=[])
        assert (10, 17) == (sp.expected_clients, sp.threshold)
        assert "accepted 10 leases" == sp.last_recount
        assert not sp.judge(10).evict

    def test_recount_rescues_one_crash_the_initial_client_held_back(self):
        """Ten clients, one crashed: R = 18 is not above T = 18 (E = 11 counts Spring's initial
        client); the recount makes E = 10, T = 17, and eviction resumes."""
        sp = SelfPreservation()
        register(registry_with(sp), 10)
        sp.end_minute(18)
        assert not sp.judge(10).evict
        sp.recount(now=900, now_ms=T0 + 900_000, renewing=[])
        assert sp.judge(10).evict


class TestRenewalWindow:
    def test_the_expectation_is_per_window(self):
        """With a 10 s window one client renewing every 10 s and Spring's initial one (30 s)
        are expected to send 1 + 1/3 renewals a window, not 8 a minute: T = int(1.33 x 0.85)."""
        sp = SelfPreservation(min_instances=0, window=10)
        register(registry_with(sp), 1, interval=10)
        assert (2, 4 / 3, 1) == (sp.expected_clients, sp.expected_per_minute, sp.threshold)

    def test_the_verdict_names_the_window(self):
        sp = SelfPreservation(min_instances=0, window=10)
        register(registry_with(sp), 10, interval=5)
        assert "the first 10 s is not over yet" in sp.judge(10).reason
        sp.end_minute(5)
        assert not sp.judge(10).evict
        assert sp.judge(10).reason.startswith("5 renewals in the last 10 s, not above")

    def test_the_default_window_is_eurekas_minute(self):
        sp = SelfPreservation(min_instances=0)
        register(registry_with(sp), 1, interval=10)
        assert (60.0, 8.0) == (sp.window, sp.expected_per_minute)
        assert "the first minute is not over yet" in sp.judge(1).reason


class TestOurDifferences:
    def test_each_client_counts_with_its_own_interval(self):
        """A client renewing every 10 s is expected to send 6 a minute; with the initial client
        at 30 s that is 8 expected, T = int(8 x 0.85) = 6."""
        sp = SelfPreservation(min_instances=0)
        register(registry_with(sp), 1, interval=10)
        assert (2, 8.0, 6) == (sp.expected_clients, sp.expected_per_minute, sp.threshold)

    def test_a_client_without_an_interval_counts_at_eurekas_30_s(self):
        sp = SelfPreservation(min_instances=0)
        register(registry_with(sp), 1, interval=0)
        assert 4.0 == sp.expected_per_minute  # the initial client and this one, 2 a minute each

    def test_a_reregistration_with_a_new_interval_moves_the_client(self):
        sp = SelfPreservation(min_instances=0)
        registry = registry_with(sp)
        register(registry, 1)
        register(registry, 1, interval=15)
        assert (2, 6.0) == (sp.expected_clients, sp.expected_per_minute)

    def test_below_the_minimum_registry_size_eviction_always_runs(self):
        sp = SelfPreservation(min_instances=10)
        register(registry_with(sp), 9)
        sp.end_minute(0)
        verdict = sp.judge(9)
        assert verdict.evict
        assert "9 instances registered, fewer than the 10" in verdict.reason

    def test_the_first_minute_holds_eviction_until_renewals_are_counted(self):
        sp = SelfPreservation()
        register(registry_with(sp), 20)
        verdict = sp.judge(20)
        assert (False, "counting renewals: the first minute is not over yet") == (
            verdict.evict,
            verdict.reason,
        )

    def test_disabled_always_evicts_and_recounts_without_refusing(self):
        sp = SelfPreservation(enabled=False)
        registry = registry_with(sp)
        register(registry, 20)
        evict_expired(registry, now_ms=T0 + 100_000)
        sp.recount(now=900, now_ms=T0 + 900_000, renewing=[])
        assert sp.judge(20).evict
        assert 1 == sp.expected_clients  # an empty registry counts as the initial client

    def test_held_verdict_says_why_with_its_inputs(self):
        sp = SelfPreservation()
        register(registry_with(sp), 20)
        sp.end_minute(20)
        reason = sp.judge(20).reason
        assert "20 renewals in the last minute, not above the threshold of 35" in reason
        assert "0.85 of the 42 expected from 21 clients" in reason

    def test_a_lasting_drop_is_accepted_at_a_recount_and_its_dead_do_not_count_twice(self):
        """Held for a whole recount interval: E becomes the renewing leases; evicting the dead
        ones afterwards does not lower it again."""
        sp = SelfPreservation(recount_interval=900)
        registry = registry_with(sp)
        register(registry, 20)
        sp.end_minute(40)
        sp.end_minute(40 + 20)  # half the clients went silent
        held = sp.judge(20)
        assert not held.evict
        sp.note(held, now=100)
        assert not sp.needs_live_count(now=999)
        sp.recount(now=999, now_ms=T0 + 999_000, renewing=[])
        assert (20, "accepted 20 leases") == (sp.expected_clients, sp.last_recount)
        assert sp.needs_live_count(now=1900)
        live = [lease.instance for lease in list(registry.leases())[:10]]
        sp.recount(now=1900, now_ms=T0 + 1_900_000, renewing=live)
        assert 10 == sp.expected_clients
        assert sp.last_recount.startswith("accepted a lasting drop to 10 renewing leases")
        assert sp.judge(20).evict  # 20 renewals a minute now beat T = 17
        for lease in list(registry.leases())[10:]:
            registry.evict(lease.instance.app, lease.instance.instance_id, now_ms=T0 + 1_900_000)
        assert 10 == sp.expected_clients

    def test_eurekas_way_holds_a_lasting_drop_forever(self):
        sp = SelfPreservation(recount_interval=900, accept_lasting_drop=False)
        register(registry_with(sp), 20)
        sp.end_minute(20)
        sp.note(sp.judge(20), now=0)
        for n in range(1, 5):
            sp.recount(now=900 * n, now_ms=T0 + 900_000 * n, renewing=[])
            assert not sp.judge(20).evict

    def test_removals_never_take_the_expectation_below_zero(self):
        sp = SelfPreservation(enabled=False)
        registry = registry_with(sp)
        register(registry, 2)
        sp.recount(now=900, now_ms=T0, renewing=[])  # E = 2 exactly
        register(registry, 1, interval=10, prefix="j")
        other = Registry()  # an instance E never counted
        register(other, 1, prefix="k")
        other.subscribe(sp)
        evict_expired(registry, now_ms=T0 + 100_000)
        assert (0, 0) == (sp.expected_clients, sp.threshold)
        evict_expired(other, now_ms=T0 + 100_000)
        assert (0, 0) == (sp.expected_clients, sp.threshold)


class TestOnlyRenewingLeasesCount:
    def test_registrations_that_never_renew_cannot_hold_eviction(self):
        """Twelve clients renewing, twenty registrations asking for a renewal a second and
        never renewing (the lease trick): only the twelve are expected, so their renewals
        keep eviction running (counted at registration, the twenty made T 1 042)."""
        sp = SelfPreservation(min_instances=0)
        registry = registry_with(sp)
        register(registry, 12)
        register(registry, 20, interval=1, prefix="trick", renew=False)
        assert (13, 22) == (sp.expected_clients, sp.threshold)
        sp.end_minute(24)
        assert sp.judge(32).evict

    def test_a_lease_counts_from_its_first_renewal_and_once(self):
        sp = SelfPreservation(min_instances=0)
        registry = registry_with(sp)
        register(registry, 1, interval=10, renew=False)
        assert 1 == sp.expected_clients
        for at in (T0 + 10_000, T0 + 20_000):
            registry.renew("ORDERS", "i-0", at)
        assert (2, 8.0) == (sp.expected_clients, sp.expected_per_minute)
        registry.register(make("i-0", renewal_interval_secs=10), now_ms=T0 + 25_000)
        assert 2 == sp.expected_clients  # registering again: still the same client
        registry.cancel("ORDERS", "i-0", now_ms=T0 + 30_000)
        assert 1 == sp.expected_clients

    def test_a_lease_never_renewed_leaves_without_lowering_the_expectation(self):
        sp = SelfPreservation(min_instances=0)
        registry = registry_with(sp)
        register(registry, 2)
        register(registry, 1, prefix="silent", renew=False)
        registry.cancel("ORDERS", "silent-0", now_ms=T0 + 1_000)
        assert 3 == sp.expected_clients

    def test_renewing_recently_is_within_three_intervals_whatever_the_lease(self):
        """What a lasting drop's recount counts: a lease of an hour that stopped renewing two
        minutes ago is not renewing, though it has not expired."""
        registry = Registry()
        instance = make("i-1", renewal_interval_secs=30, duration_secs=3600)
        registry.register(instance, now_ms=T0)
        lease = registry.get("ORDERS", "i-1", now_ms=T0)
        assert lease is not None
        assert not SelfPreservation.renews_recently(lease, T0)  # registered, never renewed
        registry.renew("ORDERS", "i-1", T0)
        assert SelfPreservation.renews_recently(lease, T0 + 90_000)
        assert not SelfPreservation.renews_recently(lease, T0 + 90_001)
        assert not lease.is_expired(T0 + 120_000)
