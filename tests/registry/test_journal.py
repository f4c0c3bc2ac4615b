"""The delta journal on its own: retention and latest-snapshot-per-instance."""

from __future__ import annotations

from registry.core import Registry
from registry.journal import DeltaJournal
from registry.model import ActionType
from tests.registry.test_core import T0, make


def journaled() -> tuple[Registry, DeltaJournal]:
    registry = Registry()
    journal = DeltaJournal(retention_ms=180_000)
    registry.subscribe(journal.record)
    return registry, journal


class TestRecent:
    def test_keeps_the_latest_snapshot_of_each_instance(self):
        """An instance changed three times appears once, as it is after the last change."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", app="PAYMENTS"), now_ms=T0)
        registry.cancel("ORDERS", "a", now_ms=T0 + 1)
        registry.register(make("a", dirty=T0 + 2), now_ms=T0 + 2)
        grouped = journal.recent(now_ms=T0 + 3)
        assert ["ORDERS", "PAYMENTS"] == [app for app, _ in grouped]
        (a,) = grouped[0][1]
        assert (ActionType.ADDED, T0 + 2) == (a.instance.action_type, a.registration_ms)

    def test_retention_is_exact_at_read_time(self):
        """A change exactly at the edge of the window is kept; one millisecond older is not."""
        registry, journal = journaled()
        registry.register(make(), now_ms=T0)
        assert 1 == len(journal.recent(now_ms=T0 + 180_000))
        assert [] == journal.recent(now_ms=T0 + 180_001)
        assert 0 == len(journal)

    def test_purge_stops_at_the_first_young_entry(self):
        """Purging removes only what is old, from the oldest end."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0 + 100_000)
        assert 1 == journal.purge(now_ms=T0 + 200_000)
        assert 1 == len(journal)
