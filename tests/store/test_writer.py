"""The write-behind writer on a real SQLite file: coalescing, and riding out a locked database."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3

import pytest
from structlog.testing import capture_logs

from registry import FakeClock
from registry.core.model import InstanceStatus
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.store.restore import restore_missing
from registry.store.sqlite import Batch, Snapshot, Store, StoredOverride
from registry.store.writer import InstanceKey, StoreWriter
from tests.factories import T0, make
from tests.helpers import eventually, locked

S = InstanceStatus


@pytest.fixture
def registry() -> Registry:
    return Registry()


async def overrides_and_history(
    writer: StoreWriter,
) -> tuple[list[StoredOverride], list[dict[str, object]]]:
    """What a fresh connection finds of the overrides: their rows, and their history."""
    store = await Store.open(writer.path, now_ms=T0)
    try:
        return (await store.load()).overrides, (await store.history())[0]
    finally:
        await store.close()


async def reloaded(writer: StoreWriter) -> Snapshot:
    """What a fresh connection reads back of the store."""
    store = await Store.open(writer.path, now_ms=T0)
    try:
        return await store.load()
    finally:
        await store.close()


async def stored(writer: StoreWriter) -> dict[str, InstanceStatus]:
    """What a fresh connection finds in the store: instance id -> status."""
    return {i.instance_id: i.status for i in (await reloaded(writer)).instances}


class TestCommit:
    async def test_a_commit_returns_once_its_own_change_is_written(
        self, registry, writer, monkeypatch
    ):
        """Waiters share flushes, but one whose change came after a flush took its batch
        waits for the next: what it asked for is on disk when it returns."""
        await writer.flush()  # opened
        store = writer._store
        assert store is not None
        taken, go_on, write = asyncio.Event(), asyncio.Event(), store.write

        async def held_write(batch: Batch) -> None:  # the real write, once let go
            taken.set()
            await go_on.wait()
            await write(batch)

        monkeypatch.setattr(store, "write", held_write)
        registry.register(make("a"), now_ms=T0)
        first = asyncio.ensure_future(writer.commit())
        await taken.wait()  # a's batch is taken and being written
        registry.register(make("b"), now_ms=T0)
        together = [asyncio.ensure_future(writer.commit()) for _ in range(5)]
        go_on.set()
        await asyncio.gather(first, *together)
        assert {"a": S.UP, "b": S.UP} == await stored(writer)
        assert (0, 2) == (writer.pending, writer.batches)


class TestBatches:
    async def test_many_changes_to_one_instance_are_one_row(self, registry, writer):
        registry.register(make("a"), now_ms=T0)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 1)
        registry.register(make("b"), now_ms=T0 + 2)
        registry.cancel("ORDERS", "b", now_ms=T0 + 3)
        assert 3 == writer.pending  # a's row, b's removal, and the override set on a
        await writer.flush()
        assert {"a": S.OUT_OF_SERVICE} == await stored(writer)
        assert (0, 1) == (writer.pending, writer.batches)

    async def test_removals_are_kept_with_whether_they_were_evictions(self, registry, writer):
        """A cancel and an eviction come back from the store as they went: peers weigh an
        eviction as evidence, a cancel as the client's goodbye."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        registry.cancel("ORDERS", "a", now_ms=T0 + 1)
        assert registry.evict("ORDERS", "b", now_ms=T0 + 100_000)
        await writer.flush()
        removals = (await reloaded(writer)).tombstones
        assert [("a", False), ("b", True)] == sorted((t.instance_id, t.expired) for t in removals)

    async def test_whether_a_client_renews_is_kept(self, registry, writer):
        """Its first renewal writes the row again: a restart expects renewals from the leases
        that renewed, and not from registrations that never did."""
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        await writer.flush()
        registry.renew("ORDERS", "a", now_ms=T0 + 30_000)
        assert 1 == writer.pending
        await writer.flush()
        snapshot = await reloaded(writer)
        ids = [i.instance_id for i in snapshot.instances]
        renewing = dict(zip(ids, snapshot.renewing, strict=True))
        assert {"a": True, "b": False} == renewing

    async def test_heartbeats_write_nothing(self, registry, writer):
        """But the first: see test_whether_a_client_renews_is_kept."""
        registry.register(make("a"), now_ms=T0)
        registry.renew("ORDERS", "a", now_ms=T0 + 1)
        await writer.flush()
        registry.renew("ORDERS", "a", now_ms=T0 + 30_000)
        assert 0 == writer.pending

    async def test_overrides_follow_the_registry(self, registry, writer):
        """Set, deleted, and kept through a cancel (which the history records): the store
        has what the registry has."""
        for iid in ("a", "b", "c"):
            registry.register(make(iid), now_ms=T0)
            registry.set_status_override("ORDERS", iid, S.OUT_OF_SERVICE, now_ms=T0)
        await writer.flush()
        registry.delete_status_override("ORDERS", "b", now_ms=T0 + 1)
        registry.cancel("ORDERS", "c", now_ms=T0 + 1, by="svc")
        await writer.flush()
        store = await Store.open(writer.path, now_ms=T0)
        overrides = (await store.load()).overrides
        history = [(h["action"], h["instance_id"]) for h in (await store.history())[0]]
        await store.close()
        assert [("ORDERS", "a", S.OUT_OF_SERVICE), ("ORDERS", "c", S.OUT_OF_SERVICE)] == sorted(
            (o.app, o.instance_id, o.status) for o in overrides
        )
        assert {
            ("set", "a"),
            ("set", "b"),
            ("set", "c"),
            ("deleted", "b"),
            ("instance_cancelled", "c"),
        } == set(history)

    async def test_an_override_set_and_deleted_between_flushes_is_in_the_history_only(
        self, registry, writer
    ):
        """No row is left, and the history has both changes, in order, with who acted."""
        registry.register(make("a"), now_ms=T0)
        note = Note("ORDERS", S.OUT_OF_SERVICE, "deploy", T0 + 1, T0 + 60_000, "ops")
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 1, note=note)
        registry.delete_status_override("ORDERS", "a", now_ms=T0 + 2, by="ops2")
        await writer.flush()
        store = await Store.open(writer.path, now_ms=T0)
        overrides, history = (await store.load()).overrides, (await store.history())[0]
        await store.close()
        assert [] == overrides
        assert [
            (T0 + 1, "set", "OUT_OF_SERVICE", "deploy", T0 + 60_000, "ops"),
            (T0 + 2, "deleted", None, None, None, "ops2"),
        ] == [
            (h["at_ms"], h["action"], h["status"], h["reason"], h["expires_ms"], h["by"])
            for h in history
        ]


class TestFaults:
    """Real faults: the database locked by another connection, its directory removed, its file
    read-only. The registry goes on; the store catches up once the fault is gone."""

    async def test_a_locked_store_degrades_then_catches_up(self, registry, writer):
        """Writes fail while another holds the lock; once it lets go, everything is written,
        newest state first, with one log line for the episode and one for the recovery."""
        registry.register(make("a"), now_ms=T0)
        with capture_logs() as logs:
            async with locked(writer.path):
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
        expected = {"a": S.OUT_OF_SERVICE, "b0": S.UP, "b1": S.UP, "b2": S.UP}
        assert expected == await stored(writer)
        overrides, history = await overrides_and_history(writer)
        assert [("a", S.OUT_OF_SERVICE)] == [(o.instance_id, o.status) for o in overrides]
        assert [("set", "a")] == [(h["action"], h["instance_id"]) for h in history]

    async def test_a_flush_cancelled_while_it_writes_writes_its_history_once(
        self, tmp_path, registry
    ):
        """The flush loop stopped while its transaction waits for a lock: the transaction
        still commits once the lock is let go, so nothing of it is queued again."""
        path = tmp_path / "registry.db"
        writer = StoreWriter(path, registry, FakeClock(), busy_timeout_ms=10_000)
        assert await writer.open() is not None
        registry.subscribe(writer)
        try:
            registry.register(make("a"), now_ms=T0)
            registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0)
            async with locked(writer.path):
                flushing = asyncio.ensure_future(writer.flush())
                # Its transaction has begun: BEGIN waits for the lock in SQLite's thread.
                await eventually(lambda: writer._store._writing.locked(), what="a transaction")
                flushing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await flushing
            assert (0, 1) == (writer.pending, writer.batches)
            await writer.flush()
            _, history = await overrides_and_history(writer)
            assert [("set", "a")] == [(h["action"], h["instance_id"]) for h in history]
        finally:
            await writer.close()

    async def test_the_flush_loop_tick_never_raises(self, registry, writer):
        registry.register(make("a"), now_ms=T0)
        async with locked(writer.path):
            await writer.flush_logged()
        assert 1 == writer.failures

    async def test_a_removed_directory_is_recreated_and_rewritten_whole(self, registry, writer):
        registry.register(make("a"), now_ms=T0)
        await writer.flush()
        await asyncio.to_thread(shutil.rmtree, writer.path.parent)
        registry.register(make("b"), now_ms=T0 + 1)
        registry.set_status_override("ORDERS", "b", S.DOWN, now_ms=T0 + 2)
        with capture_logs() as logs:
            await writer.flush()
        assert "store_file_gone" in [e["event"] for e in logs]
        assert {"a": S.UP, "b": S.DOWN} == await stored(writer)
        store = await Store.open(writer.path, now_ms=T0)
        overrides, history = (await store.load()).overrides, (await store.history())[0]
        await store.close()
        assert [("b", S.DOWN)] == [(o.instance_id, o.status) for o in overrides]
        assert [("set", "b")] == [(h["action"], h["instance_id"]) for h in history]

    async def test_a_store_locked_at_start_is_opened_later_and_merged(self, tmp_path, registry):
        """The registry starts empty and degraded. When the store opens, what it kept is
        handed over for restoring (without what this run removed meanwhile) and nothing it
        kept is wiped; this run's changes are written on top."""
        path = tmp_path / "registry.db"
        earlier = Registry()
        for iid in ("stale", "gone"):
            earlier.register(make(iid), now_ms=T0)
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(upserts=list(earlier.leases())))
        await store.close()
        handed = []
        writer = StoreWriter(
            path,
            registry,
            FakeClock(),
            busy_timeout_ms=50,
            late_restore=lambda snapshot, removed, overrides: handed.append(
                ({i.instance_id for i in snapshot.instances}, removed, overrides)
            ),
        )
        try:
            async with locked(path, exclusive=True):
                assert await writer.open() is None
                assert writer.degraded
                registry.subscribe(writer)
                registry.register(make("fresh"), now_ms=T0)
                registry.register(make("gone"), now_ms=T0)
                registry.cancel("ORDERS", "gone", now_ms=T0 + 1)
                registry.set_status_override("ORDERS", "fresh", S.DOWN, now_ms=T0 + 1)
                registry.delete_status_override("ORDERS", "fresh", now_ms=T0 + 2, status=S.UP)
                with pytest.raises(sqlite3.OperationalError):
                    await writer.flush()
            await writer.flush()
            assert not writer.degraded
            assert [({"stale", "gone"}, {("ORDERS", "gone")}, {"fresh"})] == handed
            assert {"stale": S.UP, "fresh": S.UP} == await stored(writer)
        finally:
            await writer.close()

    async def test_a_store_opened_late_keeps_the_note_of_an_override_handed_over_meanwhile(
        self, tmp_path, registry
    ):
        """While the store could not be opened, a peer handed over an override it holds,
        without its note: once it opens, the stored reason, expiry and author stay."""
        path = tmp_path / "registry.db"
        store = await Store.open(path, now_ms=T0)
        kept = StoredOverride("ORDERS", "a", S.OUT_OF_SERVICE, "disk swap", T0, T0 + 9_000, "ops")
        await store.write(Batch(overrides_set=[kept]))
        await store.close()

        def late_restore(snapshot: Snapshot, removed: set[InstanceKey], gone: set[str]) -> None:
            restore_missing(registry, snapshot, removed, gone, now_ms=T0 + 2)

        clock = FakeClock()
        writer = StoreWriter(path, registry, clock, busy_timeout_ms=50, late_restore=late_restore)
        try:
            async with locked(path, exclusive=True):
                assert await writer.open() is None
                registry.subscribe(writer)
                handed = make("a", status=S.OUT_OF_SERVICE, overridden_status=S.OUT_OF_SERVICE)
                registry.register(handed, now_ms=T0 + 1, is_replication=True)
            await writer.flush()
            overrides, _ = await overrides_and_history(writer)
            assert [kept] == overrides
            note = registry.overrides.notes.of("a", S.OUT_OF_SERVICE)
            assert ("disk swap", T0 + 9_000) == (note.reason, note.expires_ms)
        finally:
            await writer.close()


class TestOverridesWin:
    async def test_an_admins_call_after_a_pending_expiry_is_what_gets_written(
        self, registry, writer
    ):
        """An expiry queued, then the admin sets the override again before the next flush:
        the flush the admin awaits writes the override in force, not the queued removal."""
        registry.register(make("a"), now_ms=T0)
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0)
        await writer.flush()
        registry.expire_override("a", now_ms=T0 + 1)
        registry.set_status_override("ORDERS", "a", S.DOWN, now_ms=T0 + 2)
        await writer.flush()
        store = await Store.open(writer.path, now_ms=T0)
        overrides = (await store.load()).overrides
        await store.close()
        assert [("a", S.DOWN)] == [(o.instance_id, o.status) for o in overrides]
