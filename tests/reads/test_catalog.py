"""The catalog: each application's instances encoded once, re-encoded only where a change
touched, kept fresh by its refresh; and the VIP index."""

from __future__ import annotations

import asyncio

from registry.codec import Format
from registry.common.tasks import Pacer
from registry.core.model import InstanceStatus
from registry.core.registry import Registry
from registry.reads import payloads
from registry.reads.catalog import WARM_FOR, Catalog
from registry.reads.journal import DeltaJournal
from tests.factories import T0, make

INSTANCES = 3_000
APPS = 30


def populated() -> tuple[Registry, Catalog]:
    registry = Registry()
    catalog = Catalog(registry, max_age=30)
    registry.subscribe(catalog)
    for n in range(INSTANCES):
        app = f"APP{n % APPS}"
        registry.register(make(f"i-{n}", app=app, vip_address=app.lower()), now_ms=T0)
    return registry, catalog


class TestCost:
    def test_one_change_re_encodes_one_instance(self):
        """At a few thousand instances, a registration costs one encoding per format read
        (JSON and XML, full and compact)."""
        registry, catalog = populated()
        for fmt in Format:
            payloads.full_registry(registry, catalog, fmt, now=0.0)
        assert 4 * INSTANCES == catalog.encoded
        registry.register(make("new", app="APP7"), now_ms=T0 + 1)
        registry.set_status_override("APP3", "i-3", InstanceStatus.DOWN, now_ms=T0 + 1)
        for fmt in Format:
            payloads.full_registry(registry, catalog, fmt, now=1.0)
            payloads.application(registry, catalog, "APP7", fmt, now=1.0)
            payloads.vip(registry, catalog, "app3", fmt, secure=False)
        assert 4 * INSTANCES + 4 * 2 == catalog.encoded

    def test_untouched_applications_keep_their_blocks(self):
        registry, catalog = populated()
        before = payloads.full_registry(registry, catalog, Format.JSON, now=0.0).blocks
        registry.cancel("APP5", "i-5", now_ms=T0 + 1)
        after = payloads.full_registry(registry, catalog, Format.JSON, now=1.0).blocks
        changed = [
            n for n, (old, new) in enumerate(zip(before, after, strict=True)) if old is not new
        ]
        assert [0, 1 + 5] == changed  # the head (its hash), and APP5's block

    def test_a_delta_of_every_instance_encodes_each_change_once(self):
        """During a deploy the delta is as large as the registry: a change re-joins one
        application's part of it and encodes the one new entry."""
        registry = Registry()
        journal = DeltaJournal(retention_ms=180_000)
        registry.subscribe(journal)
        for n in range(INSTANCES):
            registry.register(make(f"i-{n}", app=f"APP{n % APPS}"), now_ms=T0)
        before = payloads.delta(registry, journal, Format.JSON, now_ms=T0).blocks
        registry.register(make("new", app="APP9"), now_ms=T0 + 1)
        after = payloads.delta(registry, journal, Format.JSON, now_ms=T0 + 1).blocks
        assert 1 == sum(old is not new for old, new in zip(before[1:-1], after[1:-1], strict=True))


class TestRefresh:
    async def test_blocks_older_than_the_max_age_are_joined_again_without_encoding(self):
        """Heartbeats do not rebuild blocks: the refresh does, from half the max age on, a
        share a second so that every block is done by the max age, writing the leases'
        numbers afresh around the instances' kept parts, and says which documents to drop."""
        registry, catalog = populated()
        payloads.full_registry(registry, catalog, Format.JSON, now=0.0)
        registry.renew("APP0", "i-0", now_ms=T0 + 20_000)
        refreshed: list[tuple[str, set[str]]] = []

        async def refresh(now: float) -> int:
            return await catalog.refresh(
                now=now, refreshed=lambda a, v: refreshed.append((a, v)), pacer=Pacer(), every=1
            )

        assert 0 == await refresh(14.0)
        assert [2] * 15 == [await refresh(15.0 + n) for n in range(1, 16)]  # 30 blocks by 30 s
        assert APPS == len({app for app, _ in refreshed})
        assert ("APP0", {"app0"}) in refreshed
        assert INSTANCES == catalog.encoded
        block = bytes(catalog.block("APP0", Format.JSON, now=31.0).data)
        assert b'"lastRenewalTimestamp":%d' % (T0 + 20_000) in block

    async def test_blocks_made_together_come_due_spread_out(self):
        """A storm builds every block at once; their refreshes are spread, a share a second,
        and yet every block is joined again at least every half max age plus a second."""
        registry, catalog = populated()
        payloads.full_registry(registry, catalog, Format.JSON, now=0.0)
        seconds: list[set[str]] = []
        for second in range(16, 76):
            seconds.append(set())
            await catalog.refresh(
                now=float(second),
                refreshed=lambda a, _: seconds[-1].add(a),
                pacer=Pacer(),
                every=1,
            )
        assert 2 == max(len(apps) for apps in seconds)  # ceil(30 blocks / 15 s)
        for first in range(len(seconds) - 16):
            assert APPS == len(set().union(*seconds[first : first + 16]))


class TestKeepWarm:
    async def test_the_formats_read_are_joined_and_compressed_ahead_of_the_next_read(self):
        """After changes, the blocks of a format read lately are joined and compressed off the
        read: the next gzip full document compresses nothing but its head; a format nobody
        read is left alone, and one not read for WARM_FOR is let go."""
        registry, catalog = populated()
        await catalog.prepare(Format.JSON, now=0.0, pacer=Pacer())
        document = payloads.full_registry(registry, catalog, Format.JSON, now=0.0)
        await document.gzipped()
        for n in range(5):
            registry.register(make(f"new-{n}", app=f"APP{n + 1}"), now_ms=T0 + 1)
        assert 5 == await catalog.keep_warm(now=1.0, pacer=Pacer())
        after = payloads.full_registry(registry, catalog, Format.JSON, now=1.0)
        assert [0] == [n for n, block in enumerate(after.blocks) if block.segment is None]
        assert INSTANCES + 5 == catalog.encoded  # XML was never read: nothing encoded in it
        registry.register(make("late", app="APP9"), now_ms=T0 + 2)
        assert 0 == await catalog.keep_warm(now=1.0 + WARM_FOR + 1, pacer=Pacer())
        assert 0 == await catalog.keep_warm(now=2.0 + WARM_FOR, pacer=Pacer())


class TestVips:
    def test_applications_of_a_vip_in_registry_order(self):
        registry = Registry()
        catalog = Catalog(registry)
        registry.subscribe(catalog)
        registry.register(make("a", app="B", vip_address="shared"), now_ms=T0)
        registry.register(make("b", app="A", vip_address="shared,own"), now_ms=T0)
        assert ["B", "A"] == catalog.vip_applications("shared", secure=False)
        registry.register(make("b", app="A", vip_address="own"), now_ms=T0 + 1)
        assert ["B"] == catalog.vip_applications("shared", secure=False)
        registry.cancel("B", "a", now_ms=T0 + 2)
        assert [] == catalog.vip_applications("shared", secure=False)
        assert ["A"] == catalog.vip_applications("own", secure=False)
        assert [] == catalog.vip_applications("own", secure=True)


class TestPrepare:
    async def test_a_full_document_is_encoded_a_few_applications_at_a_time(self):
        """Preparing gives the loop a turn between instances and between applications (one
        application can hold thousands); the build after it encodes nothing more."""
        registry, catalog = populated()
        pacer = Pacer(budget=0)
        await catalog.prepare(Format.XML, now=0.0, pacer=pacer)
        assert INSTANCES + APPS == pacer.yields
        assert INSTANCES == catalog.encoded
        payloads.full_registry(registry, catalog, Format.XML, now=0.0)
        assert INSTANCES == catalog.encoded

    async def test_what_changes_undo_meanwhile_is_done_again(self):
        """A change to an application the preparation has passed drops its block; another
        pass joins it again, so the build after still encodes nothing."""
        registry, catalog = populated()

        class Meddling(Pacer):
            async def pace(self) -> bool:
                if self.yields == INSTANCES:  # the first applications are done by now
                    registry.register(make("i-0", app="APP0", sid="moved"), now_ms=T0)
                return await super().pace()

        await catalog.prepare(Format.JSON, now=0.0, pacer=Meddling(budget=0))
        assert INSTANCES + 1 == catalog.encoded
        payloads.full_registry(registry, catalog, Format.JSON, now=0.0)
        assert INSTANCES + 1 == catalog.encoded

    async def test_readers_asking_at_once_share_one_run(self):
        """Thirty readers of a cold document must not each take turns of the loop."""
        _, catalog = populated()
        first, second = Pacer(budget=0), Pacer(budget=0)
        await asyncio.gather(
            catalog.prepare(Format.JSON, now=0.0, pacer=first),
            catalog.prepare(Format.JSON, now=0.0, pacer=second),
        )
        assert (INSTANCES + APPS, 0) == (first.yields, second.yields)
        assert INSTANCES == catalog.encoded

    async def test_the_delta_too(self):
        registry = Registry()
        journal = DeltaJournal(retention_ms=180_000)
        registry.subscribe(journal)
        for n in range(INSTANCES):
            registry.register(make(f"i-{n}", app=f"APP{n % APPS}"), now_ms=T0)
        pacer = Pacer(budget=0)
        await journal.prepare(Format.JSON, now_ms=T0, pacer=pacer)
        assert INSTANCES + APPS == pacer.yields
        prepared = payloads.delta(registry, journal, Format.JSON, now_ms=T0).blocks
        again = payloads.delta(registry, journal, Format.JSON, now_ms=T0).blocks
        assert all(a is b for a, b in zip(prepared[1:-1], again[1:-1], strict=True))
