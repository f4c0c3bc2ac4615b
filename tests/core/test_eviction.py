"""Eviction as a background task of the real app, time moved by the clock; its cap and pacing."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from structlog.testing import capture_logs

from registry import FakeClock, Settings
from registry.appkeys import JOURNAL
from registry.core.eviction import Evictor
from registry.core.preservation import SelfPreservation
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from tests.factories import make
from tests.helpers import fetch_json, register, registry_of


def evictor_for(registry: Registry, clock: FakeClock, **kwargs: object) -> Evictor:
    return Evictor(
        registry,
        clock,
        SelfPreservation(enabled=False),
        interval=5,
        **kwargs,  # type: ignore[arg-type]
    )


def fill(registry: Registry, clock: FakeClock, count: int, apps: int = 1) -> None:
    for n in range(count):
        registry.register(make(f"i-{n}", app=f"APP{n % apps}"), now_ms=clock.wall_ms())


class TestEvictionTask:
    async def test_silent_instance_is_evicted(self, client, clock):
        """An instance that stops renewing is gone once its lease and a sweep have passed."""
        await register(client)
        await clock.advance(90)
        assert 200 == (await client.get("/eureka/apps/ORDERS/i-1")).status
        with capture_logs() as logs:
            await clock.advance(5)
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        assert ["lease_evicted"] == [e["event"] for e in logs if e["event"] == "lease_evicted"]

    async def test_renewing_instance_stays(self, client, clock):
        """Heartbeats every 30 s keep an instance for as long as they come."""
        await register(client)
        for _ in range(10):
            await clock.advance(30)
            assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        assert 1 == len(registry_of(client))

    async def test_failing_sweep_is_logged_and_the_task_goes_on(self, client, clock, monkeypatch):
        """A sweep that raises is logged with its traceback; the next one runs."""
        registry = registry_of(client)
        original = Registry.evict
        calls = []

        def flaky(self, *args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(Registry, "evict", flaky)
        await register(client)
        with capture_logs() as logs:
            await clock.advance(95)
            await clock.advance(5)
        assert any(e["event"] == "eviction_failed" and e.get("exc_info") for e in logs)
        assert 0 == len(registry)


class TestCrashToEvicted:
    @pytest.mark.parametrize("duration", [10, 30, 90])
    async def test_gone_within_the_lease_and_one_interval(self, client, clock, duration):
        """Crash-to-evicted is at most lease duration + one eviction interval (5 s)."""
        await register(client, leaseInfo={"renewalIntervalInSecs": 5, "durationInSecs": duration})
        await clock.advance(3)
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status  # the last heartbeat
        await clock.advance(duration + 5)
        assert 0 == len(registry_of(client))


class TestLateness:
    async def test_a_late_sweep_extends_every_lease_by_its_lateness(self):
        """When the sweep itself runs 30 s late, leases get those 30 s of grace."""
        clock = FakeClock()
        registry = Registry()
        evictor = evictor_for(registry, clock)
        registry.register(make(), now_ms=clock.wall_ms())
        await clock.advance(95)  # the loop stalled: the first sweep comes 90 s late
        assert 0 == await evictor.sweep()
        await clock.advance(31)  # the lease is now 126 s old, and the sweep is on time
        assert 1 == await evictor.sweep()


class TestCap:
    @pytest.mark.parametrize("size", [0, 1, 2, 6, 7, 10, 99, 100, 101, 1000, 100_000])
    def test_limit_is_eurekas_size_minus_int_size_times_085(self, size):
        evictor = evictor_for(Registry(), FakeClock())
        assert size - int(size * 0.85) == evictor.limit(size)

    async def test_one_sweep_evicts_at_most_15_percent_of_the_registry(self):
        """40 of 100 leases expired: 15 go in the first sweep, 13 (of 85) in the next."""
        clock = FakeClock()
        registry = Registry()
        fill(registry, clock, 100)
        await clock.advance(100)
        for lease in list(registry.leases())[:60]:
            registry.renew(lease.instance.app, lease.instance.instance_id, now_ms=clock.wall_ms())
        evictor = evictor_for(registry, clock)
        assert 15 == await evictor.sweep()
        assert 13 == await evictor.sweep()
        assert 72 == len(registry)

    @pytest.mark.parametrize("window", [60, 10])
    async def test_while_self_preservation_applies_the_cap_is_per_window(self, window):
        """Renewals are counted per window (Eureka's minute by default), so sweeps every 5 s
        share one window's 15 %: the cap frees up a window on."""
        clock = FakeClock()
        registry = Registry()
        preservation = SelfPreservation(window=window)
        fill(registry, clock, 100)
        await clock.advance(100)
        for lease in list(registry.leases())[:60]:
            registry.renew(lease.instance.app, lease.instance.instance_id, now_ms=clock.wall_ms())
        evictor = Evictor(registry, clock, preservation, interval=5)
        await evictor.end_window()  # 60 renewals counted, none expected to fail: eviction runs
        assert 15 == await evictor.sweep()
        await clock.advance(5)
        assert 0 == await evictor.sweep()
        await clock.advance(window - 5)
        assert 13 == await evictor.sweep()  # a window on: 15 % of the 85 left

    async def test_a_configured_fraction_raises_the_cap(self):
        clock = FakeClock()
        registry = Registry()
        fill(registry, clock, 100)
        await clock.advance(100)
        assert 100 == await evictor_for(registry, clock, max_fraction=1.0).sweep()

    async def test_the_evicted_are_chosen_at_random(self):
        """Over many sweeps every expired lease is as likely to go, whatever its position."""
        tally: Counter[str] = Counter()
        trials = 300
        for seed in range(trials):
            clock = FakeClock()
            registry = Registry()
            fill(registry, clock, 20, apps=4)
            await clock.advance(100)
            evictor = evictor_for(registry, clock, rng=random.Random(seed))
            assert 3 == await evictor.sweep()  # 20 - int(17.0)
            remaining = {lease.instance.instance_id for lease in registry.leases()}
            tally.update(f"i-{n}" for n in range(20) if f"i-{n}" not in remaining)
        assert 20 == len(tally)
        expected = trials * 3 / 20  # 45 each
        assert all(0.5 * expected < count < 1.5 * expected for count in tally.values()), tally

    async def test_a_large_sweep_gives_the_loop_turns(self):
        """20 000 expired leases: other tasks keep running while they are scanned and evicted."""
        clock = FakeClock()
        registry = Registry()
        fill(registry, clock, 20_000, apps=7)
        await clock.advance(100)
        ticks = 0
        done = asyncio.Event()

        async def other_work() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        before = ticks
        with capture_logs():
            evicted = await evictor_for(registry, clock, max_fraction=1.0).sweep()
        done.set()
        await other
        assert 20_000 == evicted
        assert ticks - before > 3


class ShortLeases:
    """Twenty leases of 5 s renewing every second, counted for a window by a real Evictor;
    then `silent` of them stop."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.registry = Registry()
        self.preservation = SelfPreservation()
        self.evictor = Evictor(self.registry, self.clock, self.preservation, interval=5)
        self.ids = [f"i-{n}" for n in range(20)]
        for iid in self.ids:
            self.registry.register(
                make(iid, renewal_interval_secs=1, duration_secs=5), now_ms=self.clock.wall_ms()
            )

    async def run(self, seconds: int, renewing: list[str]) -> None:
        """`seconds` of renewals by `renewing`, a sweep every 5 s."""
        for second in range(1, seconds + 1):
            await self.clock.advance(1)
            for iid in renewing:
                self.registry.renew("ORDERS", iid, self.clock.wall_ms())
            if second % 5 == 0:
                await self.evictor.sweep()

    async def counted(self) -> None:
        """Two windows of everyone renewing, counted."""
        for _ in range(2):
            await self.run(60, self.ids)
            await self.evictor.end_window()


class TestExpiryAllowance:
    async def test_a_mass_expiry_of_short_leases_is_held_before_the_window_counts_it(self):
        """Half the leases stop: they expire within 5 s, long before the window's count
        shows the drop, and none is evicted, for the 15 % that may go is spent."""
        leases = ShortLeases()
        await leases.counted()
        with capture_logs() as logs:
            await leases.run(30, leases.ids[:10])
        assert 20 == len(leases.registry)
        held = [e for e in logs if e["event"] == "eviction_held"]
        assert 1 == len(held)
        assert held[0]["reason"].startswith("10 leases have expired and 0 were evicted")
        assert (10, 10) == (leases.preservation.expired, leases.preservation.expired_held)

    async def test_a_few_expiring_are_evicted(self):
        """Two of twenty stop (10 %): evicted on time, and they weigh on as departed."""
        leases = ShortLeases()
        await leases.counted()
        await leases.run(15, leases.ids[2:])
        assert 18 == len(leases.registry)
        assert (2, 1200.0) == (
            leases.preservation.departed_clients,
            pytest.approx(leases.preservation.expected_per_minute(), rel=0.02),
        )


class TestPeersEvictions:
    async def test_the_leases_a_peer_evicted_go_first(self):
        """Thirty expired leases, ten of them evicted by a peer, a cap of fifteen: the ten are
        among the fifteen, whatever the draw."""
        for seed in range(20):
            clock = FakeClock()
            registry = Registry()
            fill(registry, clock, 100)
            await clock.advance(100)
            leases = list(registry.leases())
            for lease in leases[30:]:
                registry.renew("APP0", lease.instance.instance_id, clock.wall_ms())
            on_peer = [lease.instance.instance_id for lease in leases[:10]]
            for iid in on_peer:
                removal = Tombstone("APP0", iid, make().last_dirty_ms, 0, expired=True)
                registry.bury(removal, now_ms=clock.wall_ms())
            assert 100 == len(registry)
            evictor = evictor_for(registry, clock, rng=random.Random(seed))
            assert 15 == await evictor.sweep()
            left = {lease.instance.instance_id for lease in registry.leases()}
            assert not left & set(on_peer)

    async def test_a_node_holding_eviction_holds_its_peers_evictions(self):
        """Half the leases stop and a peer evicts them: this node holds eviction, and keeps
        every one of them, saying that a peer evicted them."""
        leases = ShortLeases()
        await leases.counted()
        await leases.run(10, leases.ids[:10])
        for iid in leases.ids[10:]:
            lease = leases.registry.get("ORDERS", iid, now_ms=0)
            removal = Tombstone("ORDERS", iid, lease.instance.last_dirty_ms, 0, expired=True)
            assert not leases.registry.bury(removal, now_ms=leases.clock.wall_ms())
        await leases.run(30, leases.ids[:10])
        status = leases.preservation.status(20, leases.clock.monotonic())
        assert (20, False, 10, 10) == (
            len(leases.registry),
            status["evicting"],
            status["expired-held"],
            status["expired-on-peers"],
        )


class TestSelfPreservationScenarios:
    """Twenty instances renewing every 30 s through the API; time moved by the clock."""

    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(self_preservation__renewal_threshold_update_interval=300)

    async def start(self, client, clock, count: int = 20) -> list[str]:
        ids = [f"i-{n}" for n in range(count)]
        for iid in ids:
            await register(client, iid=iid)
        await self.renew(client, clock, ids, seconds=120)
        return ids

    async def renew(self, client, clock, ids: list[str], *, seconds: int) -> None:
        for _ in range(seconds // 30):
            await clock.advance(30)
            for iid in ids:
                assert 200 == (await client.put(f"/eureka/apps/ORDERS/{iid}")).status

    async def preservation(self, client) -> dict:
        return (await fetch_json(client, "/eureka/status"))["selfPreservation"]

    async def test_mass_silence_holds_eviction_and_says_why(self, client, clock):
        """Half the instances go silent at once: none is evicted, and status says why."""
        ids = await self.start(client, clock)
        with capture_logs() as logs:
            await self.renew(client, clock, ids[:10], seconds=240)
        assert 20 == len(registry_of(client))
        status = await self.preservation(client)
        assert status["evicting"] is False
        assert status["renews-last-minute"] == 20
        assert status["renews-threshold"] == 34  # E = 20, as the recount at 300 s found
        assert "not above the threshold of 34" in status["reason"]
        held = [e for e in logs if e["event"] == "eviction_held"]
        assert 1 == len(held)
        assert "network failure" in held[0]["reason"]

    async def test_held_eviction_resumes_when_renewals_recover(self, client, clock):
        ids = await self.start(client, clock)
        await self.renew(client, clock, ids[:10], seconds=150)
        assert not (await self.preservation(client))["evicting"]
        await self.renew(client, clock, ids, seconds=120)  # the network heals
        assert (await self.preservation(client))["evicting"]
        assert 20 == len(registry_of(client))

    async def test_a_tiny_registry_still_evicts(self, client, clock):
        """Three instances, two crash: below the minimum size, both go on time."""
        ids = await self.start(client, clock, count=3)
        await self.renew(client, clock, ids[:1], seconds=120)
        assert 1 == len(registry_of(client))
        assert "fewer than the 10" in (await self.preservation(client))["reason"]

    async def test_a_lasting_scale_down_is_accepted_at_a_recount(self, client, clock):
        """Half the instances are gone for good: held at first, accepted at the first recount
        after a whole recount interval of holding, and then all ten are evicted."""
        ids = await self.start(client, clock)
        with capture_logs() as logs:
            await self.renew(client, clock, ids[:10], seconds=660)
        assert 10 == len(registry_of(client))
        status = await self.preservation(client)
        assert status["evicting"] is True
        assert status["last-recount"].startswith("accepted a lasting drop to 10 renewing leases")
        assert 10 == status["expected-clients"]
        assert 10 == sum(e["event"] == "lease_evicted" for e in logs)

    async def test_one_crash_in_ten_is_evicted_on_time(self, client, clock):
        """Ten instances, one crashes: 18 renewals of the 20 expected are above T = 17, and
        the one that expired weighs 10 %, under the 15 % that may go: evicted within its
        lease and a sweep (Eureka's E counts Spring's initial client, T = 18, and holds it
        until its 15-minute recount)."""
        ids = await self.start(client, clock, count=10)
        await self.renew(client, clock, ids[:9], seconds=90)
        await clock.advance(5)  # i-9's last renewal at 120 s, expired at 210 s, a sweep on
        assert 9 == len(registry_of(client))
        status = await self.preservation(client)
        assert (True, 1, 20.0) == (
            status["evicting"],
            status["departed-clients"],
            status["expected-renews-per-minute"],
        )


class TestRenewalWindow:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(self_preservation__renewal_window=10)

    async def test_renewals_are_counted_and_judged_per_window(self, client, clock):
        """Twelve clients renewing every 5 s: at the end of the first 10 s window their 24
        renewals are counted, against the 24 expected a window (2 each, as they claim and
        send), T = 20: eviction runs."""
        ids = [f"i-{n}" for n in range(12)]
        lease = {"renewalIntervalInSecs": 5, "durationInSecs": 15}
        for iid in ids:
            await register(client, iid=iid, leaseInfo=lease)
        for _ in range(2):
            for iid in ids:
                assert 200 == (await client.put(f"/eureka/apps/ORDERS/{iid}")).status
            status = await TestSelfPreservationScenarios().preservation(client)
            assert (None, False) == (status["renews-last-minute"], status["evicting"])
            await clock.advance(5)
        status = await TestSelfPreservationScenarios().preservation(client)
        assert (24, 20, True) == (
            status["renews-last-minute"],
            status["renews-threshold"],
            status["evicting"],
        )
        assert "24 renewals in the last 10 s, above the threshold of 20" == status["reason"]


class TestEurekasSelfPreservation:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            self_preservation__renewal_threshold_update_interval=300,
            self_preservation__accept_lasting_drop=False,
        )

    async def test_a_lasting_drop_stays_held(self, client, clock):
        scenario = TestSelfPreservationScenarios()
        ids = await scenario.start(client, clock)
        await scenario.renew(client, clock, ids[:10], seconds=900)
        assert 20 == len(registry_of(client))
        assert (await scenario.preservation(client))["last-recount"].startswith("accepted 20")


class TestJournalCleanup:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            reads__delta_retention=60,
            reads__delta_cleanup_interval=10,
            leases__eviction_interval=3600,
        )

    async def test_old_changes_are_purged_without_any_fetch(self, client, clock):
        """The cleanup task drops journal entries past the retention on its own."""
        await register(client)
        journal = client.app[JOURNAL]
        await clock.advance(50)
        assert 1 == len(journal)
        await clock.advance(20)
        assert 0 == len(journal)
