"""The delta journal on its own: retention, latest snapshot per instance, order, blocks."""

from __future__ import annotations

import orjson

from registry.codec import Format
from registry.common.tasks import SLICE, Pacer
from registry.core.registry import Registry
from registry.reads.journal import DeltaJournal
from tests.factories import T0, make


def recent(journal: DeltaJournal, now_ms: int) -> list[tuple[str, list[dict]]]:
    """The delta's applications, each with its instances as decoded JSON."""
    blocks = journal.delta_blocks(Format.JSON, now_ms=now_ms)
    apps = orjson.loads(b"[" + b"".join(bytes(b.data) for b in blocks)[1:] + b"]")
    return [(app["name"], app["instance"]) for app in apps]


def journaled() -> tuple[Registry, DeltaJournal]:
    registry = Registry()
    journal = DeltaJournal(retention_ms=180_000)
    registry.subscribe(journal)
    return registry, journal


class TestRecent:
    def test_keeps_the_latest_snapshot_of_each_instance(self):
        """An instance changed three times appears once, as it is after the last change."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", app="PAYMENTS"), now_ms=T0)
        registry.cancel("ORDERS", "a", now_ms=T0 + 1)
        registry.register(make("a", dirty=T0 + 2), now_ms=T0 + 2)
        grouped = recent(journal, T0 + 3)
        assert ["ORDERS", "PAYMENTS"] == [app for app, _ in grouped]
        (a,) = grouped[0][1]
        assert ("ADDED", T0 + 2) == (a["actionType"], a["leaseInfo"]["registrationTimestamp"])

    def test_retention_is_exact_at_read_time(self):
        """A change exactly at the edge of the window is kept; one millisecond older is not."""
        registry, journal = journaled()
        registry.register(make(), now_ms=T0)
        assert 1 == len(recent(journal, T0 + 180_000))
        assert [] == recent(journal, T0 + 180_001)
        assert 0 == len(journal)

    def test_purge_stops_at_the_first_young_entry(self):
        """Purging removes only what is old, from the oldest end."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0 + 100_000)
        assert 1 == journal.purge(now_ms=T0 + 200_000)
        assert 1 == len(journal)


class TestOrder:
    def test_an_instance_moves_to_its_next_change_when_its_first_is_forgotten(self):
        """Order is by first change within the window, as it stands after a purge."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", app="PAYMENTS"), now_ms=T0 + 1000)
        registry.register(make("c"), now_ms=T0 + 2000)
        registry.register(make("a", dirty=T0 + 3000), now_ms=T0 + 3000)
        assert [("ORDERS", ["a", "c"]), ("PAYMENTS", ["b"])] == ids(journal, T0 + 3000)
        # a's first change goes: a now counts from its second, after b's and c's
        assert [("PAYMENTS", ["b"]), ("ORDERS", ["c", "a"])] == ids(journal, T0 + 180_500)
        assert [("ORDERS", ["c", "a"])] == ids(journal, T0 + 181_500)
        assert [("ORDERS", ["a"])] == ids(journal, T0 + 182_500)
        assert [] == ids(journal, T0 + 183_001)

    def test_only_the_changed_applications_block_is_joined_again(self):
        """A change re-joins its own application's block; others are reused as they are."""
        registry, journal = journaled()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b", app="PAYMENTS"), now_ms=T0)
        before = journal.delta_blocks(Format.XML, now_ms=T0)
        registry.register(make("c"), now_ms=T0 + 1)
        after = journal.delta_blocks(Format.XML, now_ms=T0 + 1)
        assert before[1] is after[1]
        assert before[0] is not after[0]


def ids(journal: DeltaJournal, now_ms: int) -> list[tuple[str, list[str]]]:
    return [(app, [i["instanceId"] for i in items]) for app, items in recent(journal, now_ms)]


class TestExpire:
    async def test_a_storm_leaves_the_window_a_slice_at_a_time(self):
        """Thousands of old changes go in slices with turns of the loop between, and the
        delta then reads as after a purge in one go."""
        registry, journal = journaled()
        for n in range(3_000):
            registry.register(make(f"i-{n}"), now_ms=T0)
        registry.register(make("young"), now_ms=T0 + 100_000)
        pacer = Pacer(budget=0)
        assert 3_000 == await journal.expire(now_ms=T0 + 200_000, pacer=pacer)
        assert pacer.yields >= 3_000 // SLICE
        assert [("ORDERS", ["young"])] == ids(journal, T0 + 200_000)
