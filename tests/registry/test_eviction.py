"""Eviction and journal cleanup as background tasks of the real app, time moved by the clock."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from registry import FakeClock, Settings
from registry.appkeys import JOURNAL
from registry.core import Registry
from registry.eviction import Evictor
from tests.helpers import register, registry_of
from tests.registry.test_core import make


class TestEvictionTask:
    async def test_silent_instance_is_evicted(self, client, clock):
        """An instance that stops renewing is gone once its lease and a tick have passed."""
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

    async def test_failing_tick_is_logged_and_the_task_goes_on(self, client, clock, monkeypatch):
        """A tick that raises is logged with its traceback; the next tick runs."""
        registry = registry_of(client)
        original = Registry.evict_expired
        calls = []

        def flaky(self, **kwargs):
            calls.append(kwargs)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return original(self, **kwargs)

        monkeypatch.setattr(Registry, "evict_expired", flaky)
        await register(client)
        with capture_logs() as logs:
            await clock.advance(5)
            await clock.advance(100)
        assert any(e["event"] == "eviction_failed" and e.get("exc_info") for e in logs)
        assert 0 == len(registry)


class TestLateness:
    async def test_a_late_tick_extends_every_lease_by_its_lateness(self):
        """When the tick itself runs 30 s late, leases get those 30 s of grace."""
        clock = FakeClock()
        registry = Registry()
        evictor = Evictor(registry, clock, interval=5)
        registry.register(make(), now_ms=clock.wall_ms())
        await clock.advance(95)  # the loop stalled: the first tick comes 90 s late
        assert 0 == evictor.tick()
        await clock.advance(31)  # the lease is now 126 s old, and the tick is on time
        assert 1 == evictor.tick()


class TestJournalCleanup:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(delta_retention=60, delta_cleanup_interval=10, eviction_interval=3600)

    async def test_old_changes_are_purged_without_any_fetch(self, client, clock):
        """The cleanup task drops journal entries past the retention on its own."""
        await register(client)
        journal = client.app[JOURNAL]
        await clock.advance(50)
        assert 1 == len(journal)
        await clock.advance(20)
        assert 0 == len(journal)
