"""The SQLite store on real files: round trips, migrations, refusals, corrupt files moved aside."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

import msgspec
import pytest
from structlog.testing import capture_logs

from registry.core.model import InstanceStatus
from registry.core.overrides import Note, OverrideAction, OverrideChange
from registry.core.registry import Registry
from registry.store import schema
from registry.store import sqlite as sqlite_store
from registry.store.sqlite import Batch, NewerSchema, Store, StoredOverride
from tests.factories import T0, make
from tests.helpers import sql

S = InstanceStatus
SET = OverrideAction.SET


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "registry.db"


def comparable(instance):
    return msgspec.structs.replace(instance, action_type=None)


class TestOpen:
    async def test_a_new_store_is_created_at_the_current_version_in_wal_mode(self, path):
        store = await Store.open(path, now_ms=T0)
        await store.close()
        assert [(schema.VERSION,)] == await sql(path, "SELECT version FROM schema_version")
        assert [("wal",)] == await sql(path, "PRAGMA journal_mode")

    async def test_an_unversioned_database_is_migrated(self, path):
        """Version 0 (a file with no schema of ours) is brought forward, step by step."""
        await asyncio.to_thread(path.parent.mkdir, parents=True)
        await sql(path, "CREATE TABLE unrelated (x INTEGER)")
        store = await Store.open(path, now_ms=T0)
        await store.close()
        assert [(schema.VERSION,)] == await sql(path, "SELECT version FROM schema_version")
        tables = {row[0] for row in await sql(path, "SELECT name FROM sqlite_master")}
        assert {"instances", "overrides", "override_history", "meta", "unrelated"} <= tables

    async def test_reopening_keeps_the_data_and_migrates_nothing(self, path):
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(index=7, epoch="e1"))
        await store.close()
        store = await Store.open(path, now_ms=T0)
        assert (7, "e1") == ((snapshot := await store.load()).index, snapshot.epoch)
        await store.close()

    async def test_a_version_1_database_keeps_its_overrides_and_learns_who(self, path):
        """Version 2 adds who set an override and who acted in the history."""
        await asyncio.to_thread(path.parent.mkdir, parents=True)
        await sql(
            path,
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (1)",
            *schema.MIGRATIONS[1],
            "INSERT INTO overrides VALUES ('i-1', 'ORDERS', 'OUT_OF_SERVICE', 'deploy', 5, NULL)",
        )
        store = await Store.open(path, now_ms=T0)
        (kept,) = (await store.load()).overrides
        assert ("i-1", "deploy", None) == (kept.instance_id, kept.reason, kept.set_by)
        by_ops = dataclasses.replace(kept, set_by="ops")
        set_again = OverrideChange(SET, "ORDERS", "i-1", S.OUT_OF_SERVICE, T0, by="ops")
        await store.write(Batch(overrides_set=[by_ops], history=[set_again]))
        (again,) = (await store.load()).overrides
        assert "ops" == again.set_by
        assert "ops" == ((await store.history())[0])[-1]["by"]
        await store.close()

    async def test_a_newer_schema_is_refused(self, path):
        await asyncio.to_thread(path.parent.mkdir, parents=True)
        await sql(
            path,
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (99)",
        )
        with pytest.raises(
            NewerSchema, match=f"schema version 99, newer than this server's {schema.VERSION}"
        ):
            await Store.open(path, now_ms=T0)

    async def test_a_corrupt_file_is_moved_aside_and_the_store_starts_empty(self, path):
        await asyncio.to_thread(path.parent.mkdir, parents=True)
        garbage = b"this is not a database at all" * 100
        await asyncio.to_thread(path.write_bytes, garbage)
        store = await Store.open(path, now_ms=T0)
        assert [] == (await store.load()).instances
        await store.close()
        aside = path.with_name(f"registry.db.corrupt-{T0}")
        assert garbage == await asyncio.to_thread(aside.read_bytes)


class TestRoundTrip:
    async def test_instances_index_and_epoch_come_back(self, path):
        registry = Registry()
        registry.register(make("a", metadata={"zone": "1"}), now_ms=T0)
        registry.register(make("b", app="PAYMENTS", status=S.STARTING), now_ms=T0 + 1)
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(upserts=list(registry.leases()), index=2, epoch="abc"))
        await store.close()
        store = await Store.open(path, now_ms=T0)
        snapshot = await store.load()
        await store.close()
        by_id = lambda instances: sorted(instances, key=lambda i: i.instance_id)  # noqa: E731
        assert by_id(comparable(lease.instance) for lease in registry.leases()) == by_id(
            comparable(stored) for stored in snapshot.instances
        )
        assert (2, "abc") == (snapshot.index, snapshot.epoch)

    async def test_deletes_remove_and_a_rewrite_replaces(self, path):
        registry = Registry()
        registry.register(make("a"), now_ms=T0)
        registry.register(make("b"), now_ms=T0)
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(upserts=list(registry.leases()), index=2, epoch="e"))
        registry.set_status_override("ORDERS", "a", S.OUT_OF_SERVICE, now_ms=T0 + 5)
        lease_a = registry.get("ORDERS", "a", now_ms=T0 + 5)
        await store.write(Batch(upserts=[lease_a], deletes=[("ORDERS", "b")], index=3, epoch="e"))
        snapshot = await store.load()
        await store.close()
        assert [("a", S.OUT_OF_SERVICE)] == [(i.instance_id, i.status) for i in snapshot.instances]

    async def test_overrides_and_their_history(self, path):
        """The rows hold the overrides in force; the history every change, in order."""
        store = await Store.open(path, now_ms=T0)
        note = Note("ORDERS", S.OUT_OF_SERVICE, "draining", T0, T0 + 3_600_000, "ops")
        override = StoredOverride("ORDERS", "a", S.OUT_OF_SERVICE, "draining", T0, T0 + 3_600_000)
        other = StoredOverride("ORDERS", "b", S.DOWN, None, T0 + 1, None)
        await store.write(
            Batch(
                overrides_set=[override, other],
                history=[
                    OverrideChange(SET, "ORDERS", "a", S.OUT_OF_SERVICE, T0, note, "ops"),
                    OverrideChange(SET, "ORDERS", "b", S.DOWN, T0 + 1),
                ],
            )
        )
        deleted = OverrideChange(OverrideAction.DELETED, "ORDERS", "b", None, T0 + 2, by="ops")
        await store.write(Batch(overrides_gone=["b"], history=[deleted]))
        assert [override] == (await store.load()).overrides
        assert [
            ("set", "a", "OUT_OF_SERVICE", "draining", T0 + 3_600_000, "ops"),
            ("set", "b", "DOWN", None, None, None),
            ("deleted", "b", None, None, None, "ops"),
        ] == [
            (h["action"], h["instance_id"], h["status"], h["reason"], h["expires_ms"], h["by"])
            for h in (await store.history())[0]
        ]
        await store.forget_history(before_ms=T0 + 1)
        assert 2 == len((await store.history())[0])
        await store.close()

    async def test_the_history_is_read_a_page_at_a_time_and_keeps_its_last_rows(
        self, path, monkeypatch
    ):
        monkeypatch.setattr(sqlite_store, "HISTORY_ROWS", 10)
        store = await Store.open(path, now_ms=T0)
        changes = [OverrideChange(SET, "ORDERS", f"i-{n}", S.DOWN, T0 + n) for n in range(25)]
        for start in range(0, 25, 5):
            await store.write(Batch(history=changes[start : start + 5]))
        page, after = await store.history(limit=4)
        assert ["i-15", "i-16", "i-17", "i-18"] == [h["instance_id"] for h in page]
        ids = [h["instance_id"] for h in page]
        while after is not None:
            page, after = await store.history(after=after, limit=4)
            ids += [h["instance_id"] for h in page]
        assert [f"i-{n}" for n in range(15, 25)] == ids  # the last ten, each once
        await store.close()

    async def test_a_failed_transaction_leaves_nothing_behind(self, path):
        """A batch that fails half-way is rolled back whole."""
        registry = Registry()
        registry.register(make("a"), now_ms=T0)
        store = await Store.open(path, now_ms=T0)
        await sql(
            path,
            "CREATE TRIGGER no_b BEFORE INSERT ON instances WHEN NEW.id = 'b' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        registry.register(make("b"), now_ms=T0)
        with pytest.raises(sqlite3.IntegrityError):
            await store.write(Batch(upserts=list(registry.leases()), index=2, epoch="e"))
        assert [] == (await store.load()).instances
        await store.close()


class TestUnreadableRows:
    async def test_a_bad_row_is_skipped_and_the_rest_load(self, path):
        registry = Registry()
        registry.register(make("good"), now_ms=T0)
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(upserts=list(registry.leases())))
        await sql(
            path,
            "INSERT INTO instances (app, id, doc, registration_ms, service_up_ms) "
            "VALUES ('ORDERS', 'bad', '{\"x\": 1}', 0, 0)",
            "INSERT INTO overrides (id, app, status, set_ms) "
            "VALUES ('bad', 'ORDERS', 'SIDEWAYS', 0)",
        )
        with capture_logs() as logs:
            snapshot = await store.load()
        await store.close()
        assert ["good"] == [i.instance_id for i in snapshot.instances]
        assert [] == snapshot.overrides
        assert 2 == sum(e["event"] == "store_row_unreadable" for e in logs)
        assert {("instances", "ORDERS", "bad"), ("overrides", "ORDERS", "bad")} == {
            (e["table"], e["app"], e["id"]) for e in logs if e["event"] == "store_row_unreadable"
        }
