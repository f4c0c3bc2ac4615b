"""The write-behind writer on a real SQLite file: coalescing, and riding out a locked database."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from registry import FakeClock
from registry.core import Registry
from registry.model import InstanceStatus
from registry.store.sqlite import OverrideGone, Store, StoredOverride
from registry.store.writer import StoreWriter
from tests.registry.test_core import T0, make

S = InstanceStatus


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await Store.open(tmp_path / "registry.db", now_ms=T0, busy_timeout_ms=50)
    yield store
    await store.close()


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def writer(store: Store, registry: Registry) -> StoreWriter:
    writer = StoreWriter(store, registry, FakeClock())
    registry.subscribe(writer.on_change)
    return writer


@asynccontextmanager
async def locked(path: Path) -> AsyncIterator[None]:
    """Another connection holds the write lock (as another process would) until the block ends."""
    ready, release = threading.Event(), threading.Event()

    def hold() -> None:
        db = sqlite3.connect(path)
        db.execute("BEGIN IMMEDIATE")
        ready.set()
        release.wait(30)
        db.rollback()
        db.close()

    holder = asyncio.ensure_future(asyncio.to_thread(hold))
    await asyncio.to_thread(ready.wait, 5)
    try:
        yield
    finally:
        release.set()
        await holder


class TestBatches:
    async def test_many_changes_to_one_instance_are_one_row(self, store, registry, writer):
        registry.register(make("a"), now_ms=T0)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 1)
        registry.register(make("b"), now_ms=T0 + 2)
        registry.cancel("ORDERS", "b", now_ms=T0 + 3)
        assert 2 == writer.pending
        await writer.flush()
        snapshot = await store.load()
        assert [("a", S.OUT_OF_SERVICE)] == [
            (s.instance.instance_id, s.instance.status) for s in snapshot.instances
        ]
        assert (registry.index, registry.epoch) == (snapshot.index, snapshot.epoch)
        assert (0, 1) == (writer.pending, writer.batches)

    async def test_heartbeats_write_nothing(self, registry, writer):
        registry.register(make("a"), now_ms=T0)
        await writer.flush()
        registry.renew("ORDERS", "a", now_ms=T0 + 30_000)
        assert 0 == writer.pending

    async def test_overrides_go_with_the_batch(self, store, writer):
        writer.override_set(StoredOverride("ORDERS", "a", S.DOWN, "broken disk", T0, None))
        writer.override_set(StoredOverride("ORDERS", "b", S.DOWN, None, T0, None))
        writer.override_gone(OverrideGone("ORDERS", "b", T0 + 1))
        await writer.flush()
        assert ["a"] == [o.instance_id for o in await store.overrides()]


class TestLockedDatabase:
    async def test_a_locked_store_degrades_then_catches_up(self, store, registry, writer):
        """Writes fail while another holds the lock; once it lets go, everything is written,
        newest state first, with one log line for the episode and one for the recovery."""
        registry.register(make("a"), now_ms=T0)
        with capture_logs() as logs:
            async with locked(store.path):
                for n in range(3):
                    with pytest.raises(sqlite3.OperationalError, match="locked"):
                        await writer.flush()
                    registry.register(make(f"b{n}"), now_ms=T0 + n)
                registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 5)
                assert writer.degraded
                assert "OperationalError: database is locked" == writer.last_error
            await writer.flush()
        assert not writer.degraded
        assert ["store_failed", "store_recovered"] == [
            e["event"] for e in logs if e["event"].startswith("store_")
        ]
        stored = {s.instance.instance_id: s.instance.status for s in (await store.load()).instances}
        assert {"a": S.OUT_OF_SERVICE, "b0": S.UP, "b1": S.UP, "b2": S.UP} == stored

    async def test_the_flush_loop_tick_never_raises(self, store, registry, writer):
        registry.register(make("a"), now_ms=T0)
        async with locked(store.path):
            await writer.flush_logged()
        assert 1 == writer.failures
        await asyncio.sleep(0)
