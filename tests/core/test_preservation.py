"""Self-preservation's arithmetic (core/preservation.py): what a lease weighs, what a window
counts, when eviction is held, and what a recount accepts."""

from __future__ import annotations

import pytest

from registry.core.model import Lease
from registry.core.preservation import (
    SelfPreservation,
    Tally,
    Verdict,
    expiration_enabled,
    forget,
    interval_of,
    recount_accepted,
    renewal_threshold,
    renews_recently,
    weight,
)
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from tests.factories import T0, make

S = 1000  # a second, in milliseconds
W = 60 * S  # the default counting window


def lease_of(registry: Registry, iid: str, app: str = "ORDERS") -> Lease:
    return registry.get(app, iid, now_ms=T0)


def registered(
    registry: Registry, iid: str, *, interval: int = 30, duration: int = 90, at: int = T0
) -> None:
    instance = make(iid, renewal_interval_secs=interval, duration_secs=duration)
    registry.register(instance, now_ms=at)


def renew_every(
    registry: Registry, iid: str, *, every_ms: int, start: int, end: int, app: str = "ORDERS"
) -> int:
    """Renewals of `iid` every `every_ms` from `start` while before `end`; the last one's time."""
    at = start
    while at < end:
        registry.renew(app, iid, at)
        at += every_ms
    return at - every_ms


def tally(sp: SelfPreservation, registry: Registry) -> None:
    counted = sp.tally()
    for lease in registry.leases():
        counted.add(lease)
    sp.end_window(counted)


@pytest.mark.parametrize(
    ("expected", "threshold"),
    [(0, 0), (2, 1), (4, 3), (20, 17), (200, 170), (2000, 1700)],
)
def test_the_threshold_is_int_of_the_expectation_times_085(expected: int, threshold: int) -> None:
    assert threshold == renewal_threshold(expected, 0.85)


@pytest.mark.parametrize(
    ("threshold", "renewals", "enabled"),
    [
        (18, 20, True),
        (18, 16, False),
        (18, 18, False),  # R == T holds eviction
        (0, 0, True),  # nothing is expected: nothing to hold for (Eureka holds)
        (1, 0, False),  # one renewal expected in a small registry still holds at none
        (1, 1, False),
        (1, 2, True),
    ],
)
def test_eviction_needs_renewals_above_the_threshold(
    threshold: int, renewals: int, enabled: bool
) -> None:
    assert enabled is expiration_enabled(threshold, renewals)


@pytest.mark.parametrize(
    ("counted", "expected", "accepted"),
    [(86, 100, True), (85, 100, False), (0, 11, False), (200, 100, True)],
)
def test_a_recount_refuses_drops_of_15_percent_or_more(
    counted: int, expected: int, accepted: bool
) -> None:
    assert accepted is recount_accepted(counted, expected, 0.85)


class TestWeight:
    def test_a_registration_never_renewed_weighs_nothing(self):
        registry = Registry()
        registered(registry, "i-1", interval=1)
        assert 0.0 == weight(lease_of(registry, "i-1"), W)

    def test_a_lease_renewing_as_it_claims_weighs_its_claim_once_it_has_for_a_window(self):
        """Every 30 s from its registration: 2 a minute, once it has been here a minute (one
        renewal in its first half minute weighs 1)."""
        registry = Registry()
        registered(registry, "i-1")
        renew_every(registry, "i-1", every_ms=30 * S, start=T0 + 30 * S, end=T0 + 31 * S)
        assert 1.0 == weight(lease_of(registry, "i-1"), W)
        renew_every(registry, "i-1", every_ms=30 * S, start=T0 + 60 * S, end=T0 + 300 * S)
        assert 2.0 == weight(lease_of(registry, "i-1"), W)

    def test_a_lease_weighs_what_it_sends_not_what_it_claims(self):
        """It claims a renewal a second and sends one every 2.9 s: 60 / 2.9 a minute."""
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        renew_every(registry, "i-1", every_ms=2900, start=T0 + 2900, end=T0 + 600 * S)
        assert 60 / 2.9 == pytest.approx(weight(lease_of(registry, "i-1"), W))

    def test_a_lease_never_weighs_more_than_it_claims(self):
        """It claims 30 s and renews every second: 2 a minute, however often it renews."""
        registry = Registry()
        registered(registry, "i-1")
        renew_every(registry, "i-1", every_ms=S, start=T0, end=T0 + 120 * S)
        assert 2.0 == weight(lease_of(registry, "i-1"), W)

    def test_a_burst_weighs_no_more_than_it_sent(self):
        """Thirty renewals in half a second, claiming one a second: 30 a window, not 60."""
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        renew_every(registry, "i-1", every_ms=16, start=T0 + 16, end=T0 + 31 * 16)
        assert 30.0 == weight(lease_of(registry, "i-1"), W)

    def test_silence_keeps_the_weight(self):
        """A lease that stops renewing weighs what it delivered, counted or not."""
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        renew_every(registry, "i-1", every_ms=S, start=T0, end=T0 + 120 * S)
        lease = lease_of(registry, "i-1")
        before = weight(lease, W)
        for _ in range(5):  # five windows of silence, each counted
            Tally(W, 900 * S).add(lease)
        assert (60.0, before) == (before, weight(lease, W))

    def test_a_reregistration_keeps_what_the_client_delivered(self):
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        renew_every(registry, "i-1", every_ms=S, start=T0 + S, end=T0 + 301 * S)
        registered(registry, "i-1", interval=1, duration=5, at=T0 + 301 * S)
        assert 60 * 300 / 301 == pytest.approx(weight(lease_of(registry, "i-1"), W))

    def test_registering_again_and_again_is_no_renewal(self):
        """A lease that renewed every second for ten minutes, then only registers again every
        2 s for fifteen: it weighs what it sent over the whole 25 minutes, and less as they
        go (counted as renewals, it would weigh 60 for good)."""
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        renew_every(registry, "i-1", every_ms=S, start=T0 + S, end=T0 + 601 * S)
        for at in range(602, 1500, 2):
            registered(registry, "i-1", interval=1, duration=5, at=T0 + at * S)
        assert 60 * 600 / 1498 == pytest.approx(weight(lease_of(registry, "i-1"), W))

    def test_a_lease_that_slows_down_is_weighed_over_its_last_stretch(self):
        """A lease that renewed every second for an hour and then every 2.9 s for an hour
        weighs what the second hour delivered (the horizon is 15 min), not the mean of two."""
        registry, counted = Registry(), Tally(W, 900 * S)
        registered(registry, "i-1", interval=1, duration=5)
        lease = lease_of(registry, "i-1")
        for start, every in ((T0, S), (T0 + 3600 * S, 2900)):
            for window in range(60):
                at = start + window * W
                renew_every(registry, "i-1", every_ms=every, start=at, end=at + W)
                counted.add(lease)
        assert 60 / 2.9 == pytest.approx(weight(lease, W), rel=0.03)

    def test_a_copy_of_a_renewing_lease_weighs_its_claim_until_it_renewed_here_a_window(self):
        """Restored from the store: its claim, silent or not, until a window of renewals
        here measures it (a lease claiming 1 s and renewing every 2.9 s then weighs that)."""
        registry = Registry()
        instance = make("i-1", renewal_interval_secs=1, duration_secs=5)
        registry.load([instance], now_ms=T0, renewals=[T0 - 10 * S])
        lease = lease_of(registry, "i-1")
        assert 60.0 == weight(lease, W)
        renew_every(registry, "i-1", every_ms=2900, start=T0, end=T0 + 30 * S)
        assert 60.0 == weight(lease, W)
        renew_every(registry, "i-1", every_ms=2900, start=T0 + 30 * S, end=T0 + 200 * S)
        assert 60 / 2.9 == pytest.approx(weight(lease, W), rel=0.05)

    def test_a_peers_copy_of_a_renewing_lease_weighs_its_claim(self):
        registry = Registry()
        registry.adopt(make("i-1"), now_ms=T0, last_renewal_ms=T0 - 5 * S, renewing=True)
        assert 2.0 == weight(lease_of(registry, "i-1"), W)

    def test_a_copy_of_a_lease_never_renewed_weighs_nothing(self):
        """A registration that claims a renewal a second and never renews weighs nothing
        where it registered, nor on a peer that copies it, nor after a restart."""
        registry = Registry()
        instance = make("i-1", renewal_interval_secs=1, duration_secs=5)
        registry.adopt(instance, now_ms=T0, last_renewal_ms=T0 - 5 * S)
        restored = Registry()
        restored.load([instance], now_ms=T0, renewals=[T0 - 5 * S], renewing=[False])
        assert (0.0, 0.0) == (
            weight(lease_of(registry, "i-1"), W),
            weight(lease_of(restored, "i-1"), W),
        )

    def test_a_replicated_registration_weighs_nothing_until_it_renews(self):
        registry = Registry()
        registry.register(make("i-1"), now_ms=T0, is_replication=True)
        assert 0.0 == weight(lease_of(registry, "i-1"), W)

    def test_a_forgotten_lease_weighs_nothing_and_is_counted_again_when_it_renews(self):
        registry = Registry()
        registered(registry, "i-1")
        renew_every(registry, "i-1", every_ms=30 * S, start=T0, end=T0 + 120 * S)
        lease = lease_of(registry, "i-1")
        forget(lease)
        assert 0.0 == weight(lease, W)
        renew_every(registry, "i-1", every_ms=30 * S, start=T0 + 600 * S, end=T0 + 700 * S)
        assert 2.0 == weight(lease, W)
        assert not renews_recently(lease, T0 + 781 * S)  # three intervals after its last

    def test_a_forgotten_copy_is_measured_from_its_renewals_not_weighed_as_a_copy(self):
        """Restored from the store and silent through a lasting drop, then back: it is no
        longer a copy weighing its claim, but a lease counted from its next renewal."""
        registry = Registry()
        registry.load([make("i-1")], now_ms=T0, renewals=[T0 - 10 * S])
        lease = lease_of(registry, "i-1")
        forget(lease)
        registry.renew("ORDERS", "i-1", T0 + 900 * S)
        assert (0.0, False) == (weight(lease, W), lease.carried)
        renew_every(registry, "i-1", every_ms=30 * S, start=T0 + 930 * S, end=T0 + 1000 * S)
        assert 2.0 == weight(lease, W)


class TestRenewsRecently:
    @pytest.mark.parametrize(
        ("interval", "since_ms", "renewing"),
        [(30, 90 * S, True), (30, 90 * S + 1, False), (1, 3 * S, True), (1, 3 * S + 1, False)],
    )
    def test_a_lease_is_renewing_up_to_three_of_its_intervals_after_its_last_renewal(
        self, interval: int, since_ms: int, renewing: bool
    ):
        registry = Registry()
        registered(registry, "i-1", interval=interval, duration=3 * interval)
        registry.renew("ORDERS", "i-1", T0 + S)
        assert renewing is renews_recently(lease_of(registry, "i-1"), T0 + S + since_ms)


class TestWindowCount:
    def test_each_lease_counts_up_to_one_renewal_more_than_it_weighs(self):
        """A lease weighing 2 that renewed 10 times in the window counts 3: its extra
        renewals cannot hide another lease's silence."""
        registry = Registry()
        registered(registry, "i-1")
        renew_every(registry, "i-1", every_ms=30 * S, start=T0, end=T0 + 120 * S)
        counted = Tally(W, 900 * S)
        counted.add(lease_of(registry, "i-1"))
        renew_every(registry, "i-1", every_ms=6 * S, start=T0 + 120 * S, end=T0 + 180 * S)
        counted = Tally(W, 900 * S)
        counted.add(lease_of(registry, "i-1"))
        assert (2.0, 3) == (counted.expected, counted.renewals)

    def test_a_window_counts_the_renewals_since_the_last(self):
        registry = Registry()
        registered(registry, "i-1", interval=1, duration=5)
        lease = lease_of(registry, "i-1")
        found = []
        for window in range(3):
            start = T0 + window * W
            renew_every(registry, "i-1", every_ms=S, start=start, end=start + W)
            counted = Tally(W, 900 * S)
            counted.add(lease)
            found.append(counted.renewals)
        assert [60, 60, 60] == found

    def test_a_lease_of_an_interval_longer_than_the_window_counts_in_the_windows_it_renews(
        self,
    ):
        """Every 90 s in a 60 s window: 2/3 of a renewal a window, one in two windows of
        three; counted whole where it lands."""
        registry = Registry()
        registered(registry, "i-1", interval=90, duration=270)
        lease = lease_of(registry, "i-1")
        counts = []
        for window in range(9):
            for at in range(0, 540, 90):  # renewals at 0, 90, ... 450 s
                if window * 60 <= at < (window + 1) * 60:
                    registry.renew("ORDERS", "i-1", T0 + at * S)
            counted = Tally(W, 900 * S)
            counted.add(lease)
            counts.append(counted.renewals)
        assert [1, 1, 0, 1, 1, 0, 1, 1, 0] == counts
        assert pytest.approx(2 / 3) == weight(lease, W)


def half_silent(sp: SelfPreservation, count: int = 20, *, interval: int = 30) -> Registry:
    """`count` leases renewing every `interval` for five minutes, counted a window at a time;
    then half of them silent for a window."""
    registry = Registry()
    for n in range(count):
        registered(registry, f"i-{n}", interval=interval, duration=3 * interval)
    for window in range(5):
        for n in range(count):
            start = T0 + window * W
            renew_every(registry, f"i-{n}", every_ms=interval * S, start=start, end=start + W)
        tally(sp, registry)
    for n in range(count // 2):
        start = T0 + 5 * W
        renew_every(registry, f"i-{n}", every_ms=interval * S, start=start, end=start + W)
    tally(sp, registry)
    return registry


class TestVerdicts:
    def test_half_the_leases_falling_silent_holds_eviction_and_says_why(self):
        sp = SelfPreservation()
        half_silent(sp)
        verdict = sp.judge(20)
        assert (False, 40.0, 20, 34) == (
            verdict.evict,
            sp.expected_per_minute(),
            sp.renewals_last_minute,
            sp.threshold(),
        )
        assert verdict.reason.startswith(
            "20 renewals in the last minute, not above the threshold of 34 (0.85 of the 40.0 "
            "expected from 20 leases)"
        )

    def test_all_renewing_evicts(self):
        sp = SelfPreservation()
        registry = half_silent(sp)
        for n in range(10, 20):
            start = T0 + 6 * W
            renew_every(registry, f"i-{n}", every_ms=30 * S, start=start, end=start + W)
        for n in range(10):
            start = T0 + 6 * W
            renew_every(registry, f"i-{n}", every_ms=30 * S, start=start, end=start + W)
        tally(sp, registry)
        assert sp.judge(20).evict

    def test_the_first_window_holds_eviction_until_renewals_are_counted(self):
        sp = SelfPreservation()
        assert "counting renewals: the first minute is not over yet" == sp.judge(20).reason

    def test_below_the_minimum_size_eviction_always_runs(self):
        sp = SelfPreservation(min_instances=10)
        half_silent(sp, count=8)
        verdict = sp.judge(8)
        assert (True, False) == (verdict.evict, verdict.guarding)
        assert "8 instances registered, fewer than the 10" in verdict.reason

    def test_disabled_always_evicts(self):
        sp = SelfPreservation(enabled=False)
        half_silent(sp)
        assert (True, "self-preservation is disabled") == (sp.judge(20).evict, sp.judge(20).reason)

    def test_the_verdict_names_a_shortened_window(self):
        sp = SelfPreservation(window=10)
        assert "the first 10 s is not over yet" in sp.judge(20).reason

    def test_leases_that_claim_more_than_they_send_cannot_hold_eviction(self):
        """Twelve leases renewing every second, three claiming a second and renewing every
        2.9 s: the three weigh what they send, and eviction runs (counted by their claims,
        they held it for good)."""
        sp, registry = SelfPreservation(), Registry()
        ids = [f"honest-{n}" for n in range(12)] + [f"gaming-{n}" for n in range(3)]
        for iid in ids:
            registered(registry, iid, interval=1, duration=5)
        for window in range(3):
            start = T0 + window * W
            for iid in ids:
                every = S if iid.startswith("honest") else 2900
                renew_every(registry, iid, every_ms=every, start=start, end=start + W)
            tally(sp, registry)
        assert sp.judge(15).evict, sp.judge(15).reason
        assert 12 * 60 + 3 * 60 / 2.9 == pytest.approx(sp.expected_per_minute(), rel=0.02)

    def test_a_mass_expiry_of_short_leases_holds_before_the_window_counts_it(self):
        """Leases of 5 s renewing every second: half expire five seconds into a window whose
        count will show it only at its end; what has expired weighs 15 % or more of the
        expectation, so eviction is held now."""
        sp = SelfPreservation()
        half_silent(sp, interval=1)
        sp.end_window(_counted_like_before(sp))  # the last window counted nothing amiss
        sp.found_expired(10, 600.0, 0)
        verdict = sp.judge(20)
        assert not verdict.evict
        assert verdict.reason.startswith("10 leases have expired and 0 were evicted")

    def test_a_few_expired_leases_are_evicted(self):
        sp = SelfPreservation()
        half_silent(sp, interval=1)
        sp.end_window(_counted_like_before(sp))
        sp.found_expired(2, 120.0, 0)  # 120 of 1 200: 10 %
        assert sp.judge(20).evict


def _counted_like_before(sp: SelfPreservation) -> Tally:
    """A window's count in which every lease renewed as it weighs."""
    counted = Tally(sp.window_ms, sp.horizon_ms)
    counted.expected, counted.clients = sp.expected_live, sp.clients
    counted.renewals = int(sp.expected_live)
    return counted


class TestExpiryAndRecount:
    def test_an_eviction_does_not_lower_the_expectation_before_a_recount(self):
        sp = SelfPreservation()
        half_silent(sp)
        before = (sp.expected_per_minute(), sp.threshold())
        sp.evicted(2.0)
        assert before == (sp.expected_per_minute(), sp.threshold())
        assert (2.0, 1) == (sp.departed, sp.departed_clients)

    def test_the_departed_weigh_on_through_the_next_window(self):
        """Evicted, a lease is no longer counted, but its weight stays departed."""
        sp = SelfPreservation()
        registry = half_silent(sp)
        lease = lease_of(registry, "i-19")
        sp.evicted(weight(lease, W))
        registry.evict("ORDERS", "i-19", now_ms=T0 + 3600 * S)
        tally(sp, registry)
        assert 40.0 == sp.expected_per_minute()

    def test_a_cancel_lowers_the_expectation_at_the_next_window(self):
        sp = SelfPreservation()
        registry = half_silent(sp)
        registry.cancel("ORDERS", "i-19", now_ms=T0 + 6 * W)
        tally(sp, registry)
        assert (38.0, 0) == (sp.expected_per_minute(), sp.departed_clients)

    def test_a_recount_accepts_a_small_drop(self):
        sp = SelfPreservation()
        half_silent(sp)
        sp.evicted(2.0)
        sp.recount()
        assert (38.0, 0.0, 19, 0) == (
            sp.expected_per_minute(),
            sp.departed,
            sp.expected_clients(),
            sp.departed_clients,
        )
        assert (
            "accepted 19 leases weighing 38.0 renewals a minute (1 evicted since the last)"
            == sp.last_recount
        )

    def test_a_recount_with_nothing_evicted_accepts(self):
        sp = SelfPreservation()
        sp.recount()
        assert "accepted 0 leases weighing 0.0 renewals a minute" == sp.last_recount

    def test_a_recount_refuses_a_drop_of_15_percent_or_more(self):
        sp = SelfPreservation()
        half_silent(sp)
        for _ in range(4):
            sp.evicted(2.0)  # 8 of 40
        sp.recount()
        assert 40.0 == sp.expected_per_minute()
        assert (
            "refused: 4 leases evicted since the last accepted recount weigh 8.0 of the 40.0 "
            "renewals expected, a drop of 15 % or more"
        ) == sp.last_recount

    def test_a_lasting_drop_is_accepted_and_its_silent_leases_stop_weighing(self):
        sp = SelfPreservation(recount_interval=900)
        half_silent(sp)
        sp.note(sp.judge(20), now=100)
        assert not sp.needs_live_count(now=999)
        assert sp.needs_live_count(now=1000)
        sp.evicted(2.0)
        sp.lasting_drop(now=1000, silent=9, silent_weight=18.0)
        assert (20.0, 10, 0.0) == (sp.expected_per_minute(), sp.expected_clients(), sp.departed)
        assert (
            "accepted a lasting drop to 10 renewing leases (eviction had been held for 15 min)"
            == sp.last_recount
        )

    def test_a_lasting_drop_of_every_lease_leaves_nothing_expected(self):
        """Every lease silent for the whole recount interval (a scale-down to nothing):
        nothing weighs, and the next registrations are not held against their absence."""
        sp = SelfPreservation(recount_interval=900)
        half_silent(sp)
        sp.note(sp.judge(20), now=100)
        sp.lasting_drop(now=1900, silent=20, silent_weight=40.0)
        assert (0.0, 0, 0) == (sp.expected_per_minute(), sp.expected_clients(), sp.threshold())
        assert (
            "accepted a lasting drop to 0 renewing leases (eviction had been held for 30 min)"
            == sp.last_recount
        )

    def test_eurekas_way_never_needs_the_live_count(self):
        sp = SelfPreservation(recount_interval=900, accept_lasting_drop=False)
        half_silent(sp)
        sp.note(sp.judge(20), now=0)
        assert not sp.needs_live_count(now=10_000)


class TestWarmRestart:
    def test_a_restart_expects_renewals_from_the_leases_it_restored(self):
        """Twenty leases restored that were renewing every 30 s: after the first window,
        with none of them renewing (a network failure after the restart), 40 renewals a
        minute are expected and eviction is held."""
        registry, sp = Registry(), SelfPreservation()
        instances = [make(f"i-{n}") for n in range(20)]
        registry.load(instances, now_ms=T0, renewals=[T0 - 10 * S] * 20)
        tally(sp, registry)
        tally(sp, registry)  # a second window of silence: still expected
        assert (40.0, 20, 34, 0) == (
            sp.expected_per_minute(),
            sp.expected_clients(),
            sp.threshold(),
            sp.renewals_last_minute,
        )
        assert not sp.judge(20).evict

    def test_restored_leases_that_renew_are_measured_from_here(self):
        registry, sp = Registry(), SelfPreservation()
        instances = [make(f"i-{n}", renewal_interval_secs=1, duration_secs=5) for n in range(20)]
        registry.load(instances, now_ms=T0, renewals=[T0 - 10 * S] * 20)
        for window in range(3):
            start = T0 + window * W
            for n in range(20):
                renew_every(registry, f"i-{n}", every_ms=2900, start=start, end=start + W)
            tally(sp, registry)
        assert 20 * 60 / 2.9 == pytest.approx(sp.expected_per_minute(), rel=0.05)
        assert sp.judge(20).evict


class TestPeersEvictions:
    def test_a_peers_eviction_leaves_the_lease_to_this_nodes_eviction(self):
        """The peer saw no renewal after the last one here: the lease stays, marked, until
        this node's own eviction takes it."""
        registry = Registry()
        registered(registry, "i-1")
        registry.renew("ORDERS", "i-1", T0 + S)
        removal = Tombstone("ORDERS", "i-1", T0, T0 + S, expired=True)
        assert not registry.bury(removal, now_ms=T0 + 100 * S)
        assert 1 == len(registry)
        assert {("ORDERS", "i-1"): T0 + S} == registry.expired_on_peers
        registry.evict("ORDERS", "i-1", now_ms=T0 + 100 * S)
        assert {} == registry.expired_on_peers

    def test_a_peers_cancel_removes_the_lease(self):
        registry = Registry()
        registered(registry, "i-1")
        removal = Tombstone("ORDERS", "i-1", T0, T0 + S)
        assert registry.bury(removal, now_ms=T0 + 2 * S)
        assert 0 == len(registry)

    def test_a_peers_eviction_ends_a_restored_grace(self):
        """A restored lease in its grace, not renewed for longer than its duration: the
        peer's eviction is newer evidence, and the lease may expire here now."""
        registry = Registry()
        registry.load([make("i-1")], now_ms=T0, renewals=[T0 - 200 * S])
        lease = lease_of(registry, "i-1")
        assert not lease.is_expired(T0 + S)
        registry.bury(Tombstone("ORDERS", "i-1", T0, T0 - 200 * S, expired=True), now_ms=T0 + S)
        assert lease.is_expired(T0 + S)


class TestWhatItSays:
    """The verdicts' reasons and `status()` as GET status and the logs show them, word for
    word: an operator reads them to learn why eviction is held."""

    def test_a_held_registry_reports_every_input(self):
        sp = SelfPreservation()
        half_silent(sp)
        sp.found_expired(3, 6.0, 1)
        sp.evicted(2.0)
        sp.note(sp.judge(20), now=100)
        assert {
            "enabled": True,
            "evicting": False,
            "reason": sp.judge(20).reason,
            "registry-size": 20,
            "min-instances": 10,
            "expected-clients": 20,
            "expected-renews-per-minute": 40.0,
            "departed-clients": 1,
            "departed-renews-per-minute": 2.0,
            "renews-threshold": 34,
            "renews-last-minute": 20,
            "renewal-percent-threshold": 0.85,
            "expired": 3,
            "expired-held": 2,
            "expired-on-peers": 1,
            "held-for-seconds": 61,
            "last-recount": "none yet",
        } == sp.status(20, now=160.6)
        sp.note(Verdict(True, "renewing again"), now=170)
        assert None is sp.status(20, now=180)["held-for-seconds"]

    def test_a_new_node_reports_that_it_is_counting(self):
        assert {
            "enabled": True,
            "evicting": False,
            "reason": "counting renewals: the first minute is not over yet",
            "registry-size": 10,
            "min-instances": 10,
            "expected-clients": 0,
            "expected-renews-per-minute": 0.0,
            "departed-clients": 0,
            "departed-renews-per-minute": 0.0,
            "renews-threshold": 0,
            "renews-last-minute": None,
            "renewal-percent-threshold": 0.85,
            "expired": 0,
            "expired-held": 0,
            "expired-on-peers": 0,
            "held-for-seconds": None,
            "last-recount": "none yet",
        } == SelfPreservation().status(10, now=0)

    def test_after_the_first_count_a_small_expectation_is_evicted_from(self):
        """Ten leases renewing every two minutes (5 a minute, an allowance of 0.75): before
        any sweep has found something expired, nothing has been lost."""
        sp = SelfPreservation()
        counted = sp.tally()
        counted.expected, counted.clients, counted.renewals = 5.0, 10, 6
        sp.end_window(counted)
        assert "6 renewals in the last minute, above the threshold of 4" == sp.judge(10).reason

    def test_the_rates_shown_are_rounded_to_thousandths(self):
        sp = SelfPreservation()
        counted = sp.tally()
        counted.expected, counted.clients, counted.renewals = 60 / 2.9, 1, 20
        sp.end_window(counted)
        sp.evicted(1 / 3)
        status = sp.status(1, now=0)
        assert (20.69, 0.333) == (
            status["expected-renews-per-minute"],
            status["departed-renews-per-minute"],
        )

    def test_renewals_at_the_threshold_say_why_and_when_eviction_resumes(self):
        sp = SelfPreservation()
        half_silent(sp)
        assert (
            "20 renewals in the last minute, not above the threshold of 34 (0.85 of the 40.0 "
            "expected from 20 leases): many leases stopped renewing at once, which looks like "
            "a network failure rather than instances dying. Eviction resumes when renewals "
            "recover, or at a recount once the drop has lasted 15 min"
        ) == sp.judge(20).reason
        eurekas = SelfPreservation(accept_lasting_drop=False)
        half_silent(eurekas)
        assert eurekas.judge(20).reason.endswith(
            "instances dying. Eviction resumes when renewals recover"
        )

    def test_a_mass_expiry_says_what_it_weighs(self):
        sp = SelfPreservation()
        half_silent(sp, interval=1)
        sp.end_window(_counted_like_before(sp))
        sp.evicted(60.0)
        sp.found_expired(10, 600.0, 0)
        assert (
            "10 leases have expired and 1 were evicted since the last accepted recount: they "
            "weigh 660.0 of the 1200.0 renewals a minute expected, 15 % or more, which looks "
            "like a network failure rather than instances dying. Eviction resumes when "
            "renewals recover, or at a recount once the drop has lasted 15 min"
        ) == sp.judge(20).reason

    def test_an_evicting_verdict_gives_the_count_and_the_threshold(self):
        sp = SelfPreservation()
        registry = half_silent(sp)
        for n in range(20):
            start = T0 + 6 * W
            renew_every(registry, f"i-{n}", every_ms=30 * S, start=start, end=start + W)
        tally(sp, registry)
        verdict = sp.judge(20)
        assert (True, True) == (verdict.evict, verdict.guarding)
        assert (40, 32) == (sp.renewals_last_minute, sp.threshold())  # the silent half weighs less
        assert "40 renewals in the last minute, above the threshold of 32" == verdict.reason

    @pytest.mark.parametrize(
        ("size", "reason"),
        [
            (1, "1 instance registered, fewer than the 10 where self-preservation applies"),
            (9, "9 instances registered, fewer than the 10 where self-preservation applies"),
        ],
    )
    def test_below_the_minimum_the_reason_counts_the_instances(self, size: int, reason: str):
        assert (True, reason) == (
            SelfPreservation().judge(size).evict,
            SelfPreservation().judge(size).reason,
        )

    def test_at_the_minimum_self_preservation_applies(self):
        verdict = SelfPreservation().judge(10)
        assert (False, True) == (verdict.evict, verdict.guarding)

    def test_disabled_does_not_guard(self):
        verdict = SelfPreservation(enabled=False).judge(20)
        assert (True, False) == (verdict.evict, verdict.guarding)

    def test_a_shortened_window_is_named_in_seconds(self):
        sp = SelfPreservation(window=10, recount_interval=90)
        counted = sp.tally()
        counted.expected, counted.clients, counted.renewals = 40.0, 20, 20
        sp.end_window(counted)
        assert sp.judge(20).reason.startswith("20 renewals in the last 10 s, not above")
        assert sp.judge(20).reason.endswith("once the drop has lasted 1.5 min")
        sp.recount()
        assert "accepted 20 leases weighing 40.0 renewals a 10 s" == sp.last_recount


class TestTheAllowance:
    """What has expired, with what was evicted, may weigh less than `1 - p` of `E`."""

    @staticmethod
    def counted(percent: float) -> SelfPreservation:
        sp = SelfPreservation(percent=percent)
        half_silent(sp)  # 40 expected
        sp.end_window(_counted_like_before(sp))
        return sp

    def test_exactly_the_allowance_holds_and_less_evicts(self):
        sp = self.counted(0.75)  # an allowance of 10.0, exact in binary
        sp.evicted(2.0)
        sp.found_expired(4, 8.0, 0)
        assert (10.0, False) == (sp.allowance(), sp.judge(20).evict)
        sp.found_expired(4, 7.5, 0)
        assert sp.judge(20).evict

    def test_evictions_alone_never_hold(self):
        """Nothing expired now: what was evicted before is the recount's to judge."""
        sp = self.counted(0.75)
        for _ in range(6):
            sp.evicted(2.0)
        sp.found_expired(0, 0.0, 0)
        assert sp.judge(20).evict


class TestBookkeeping:
    def test_a_lease_that_weighed_nothing_departs_as_nothing(self):
        sp = SelfPreservation()
        half_silent(sp)
        sp.found_expired(2, 2.0, 0)
        sp.evicted(0.0)
        assert (40.0, 20, 0, 1) == (
            sp.expected_per_minute(),
            sp.expected_clients(),
            sp.departed_clients,
            sp.expired_held,
        )
        sp.evicted(0.0)
        sp.evicted(0.0)
        assert 0 == sp.expired_held

    def test_evictions_never_drive_the_counts_below_nothing(self):
        sp = SelfPreservation()
        sp.evicted(3.0)
        assert (0.0, 0, 3.0, 1) == (sp.expected_live, sp.clients, sp.departed, sp.departed_clients)

    def test_each_window_is_kept_for_the_chart_with_its_threshold(self):
        sp = SelfPreservation()
        half_silent(sp)
        assert [*[(40, 34)] * 5, (20, 34)] == list(sp.history)

    def test_the_chart_keeps_the_last_half_hour(self):
        sp = SelfPreservation()
        for renewals in range(35):
            counted = sp.tally()
            counted.renewals = renewals
            sp.end_window(counted)
        assert list(range(5, 35)) == [renewals for renewals, _ in sp.history]

    def test_note_says_when_the_verdict_changes(self):
        sp = SelfPreservation()
        held, evicting = Verdict(False, "held"), Verdict(True, "evicting")
        assert [True, False, True, False] == [
            sp.note(held, now=10),
            sp.note(held, now=20),
            sp.note(evicting, now=30),
            sp.note(evicting, now=40),
        ]
        assert None is sp.paused_since
        sp.note(held, now=50)
        assert 50 == sp.paused_since

    def test_disabled_never_needs_the_live_count(self):
        sp = SelfPreservation(enabled=False, recount_interval=900)
        sp.note(Verdict(False, "held"), now=0)
        assert not sp.needs_live_count(now=10_000)

    def test_a_disabled_recount_accepts_whatever_departed(self):
        sp = SelfPreservation(enabled=False)
        half_silent(sp)
        for _ in range(10):
            sp.evicted(2.0)
        sp.recount()
        assert (20.0, 0) == (sp.expected_per_minute(), sp.departed_clients)


class TestMeasures:
    def test_a_lease_claiming_no_interval_is_taken_at_eurekas_30_s(self):
        registry = Registry()
        registry.load([make("i-1", renewal_interval_secs=0)], now_ms=T0, renewals=[T0 - S])
        assert (30.0, 2.0) == (
            interval_of(lease_of(registry, "i-1").instance),
            weight(lease_of(registry, "i-1"), W),
        )

    @pytest.mark.parametrize(("last_ms", "weighs"), [(W - 1, 60.0), (W, 2.0)])
    def test_a_copy_is_measured_once_it_has_renewed_here_for_a_whole_window(
        self, last_ms: int, weighs: float
    ):
        """Claiming a renewal a second, a restored lease renews twice in its first window:
        its claim until the window is full, then the two it sent."""
        registry = Registry()
        instance = make("i-1", renewal_interval_secs=1, duration_secs=90)
        registry.load([instance], now_ms=T0, renewals=[T0 - S])
        registry.renew("ORDERS", "i-1", T0 + 10 * S)
        registry.renew("ORDERS", "i-1", T0 + last_ms)
        assert weighs == weight(lease_of(registry, "i-1"), W)

    @pytest.mark.parametrize(("stretch_ms", "split"), [(450 * S - 1, False), (450 * S, True)])
    def test_a_stretch_of_half_the_horizon_becomes_the_earlier_one(
        self, stretch_ms: int, split: bool
    ):
        """With the default 15 min horizon: a lease counted from its registration becomes
        measured over its last stretch once it has renewed for 7.5 min."""
        registry = Registry()
        registered(registry, "i-1")
        renew_every(registry, "i-1", every_ms=30 * S, start=T0 + 30 * S, end=T0 + 420 * S)
        registry.renew("ORDERS", "i-1", T0 + stretch_ms)
        lease = lease_of(registry, "i-1")
        SelfPreservation().tally().add(lease)
        assert split == (lease.counted_from_ms == T0 + stretch_ms)
        assert (14 if split else 0, stretch_ms if split else 0) == (
            lease.earlier_renewals,
            lease.earlier_ms,
        )

    def test_half_an_odd_horizon_is_rounded_down_to_a_millisecond(self):
        registry = Registry()
        registered(registry, "i-1")
        registry.renew("ORDERS", "i-1", T0 + 30 * S)
        registry.renew("ORDERS", "i-1", T0 + 60 * S)
        lease = lease_of(registry, "i-1")
        Tally(W, 120 * S + 1).add(lease)
        assert (2, 60 * S) == (lease.earlier_renewals, lease.earlier_ms)

    def test_the_horizon_is_a_recount_interval_and_two_windows_at_least(self):
        assert (900 * S, 120 * S, 20 * S) == (
            SelfPreservation().horizon_ms,
            SelfPreservation(recount_interval=60).horizon_ms,
            SelfPreservation(window=10, recount_interval=5).horizon_ms,
        )
