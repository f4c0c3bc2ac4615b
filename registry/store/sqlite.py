"""The SQLite store, through aiosqlite: its thread does the disk work, off the event loop.

WAL mode, one connection (so one writer), `synchronous=FULL` so that what a commit returned for
survives a crash of the machine, not only of the process: an admin's override is acknowledged
only after its commit. Opening a database brings its schema up to date, moves a corrupt file
aside (the node then starts empty, or from its peers) and refuses one written by a newer server.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import aiosqlite
import orjson
import structlog

from registry.codec import wire
from registry.codec.checks import (
    app_check_from_fields,
    app_check_removal_from_fields,
    held_fields,
    held_from_item,
)
from registry.core.app_checks import AppCheck
from registry.core.checks import HeldDown
from registry.core.model import InstanceInfo, InstanceStatus, LeaseRecord
from registry.core.overrides import OverrideChange
from registry.core.tombstones import Tombstone
from registry.errors import BadInput
from registry.store import record, schema

log = structlog.get_logger()

BUSY_TIMEOUT_MS = 5_000  # how long a statement waits for another connection's lock
READ_FORMATS = "read_formats"  # meta key: media types full documents were read in, by commas


# The override audit trail keeps its last HISTORY_ROWS changes (and what is younger than
# store.override_history_retention): a peer writing 485 000 rows in seconds made one read of it
# 107 MB. It is read a page at a time (`Store.history`).
HISTORY_ROWS = 100_000


class NewerSchema(Exception):
    """The database was written by a newer server: refuse it rather than misread it."""


class CorruptStore(Exception):
    """The database is not sound, and this node was told to refuse to start without it
    (`store.refuse_corrupt`) rather than move it aside and start empty."""


@dataclass(frozen=True, slots=True)
class MovedAside:
    """A corrupt database moved aside: the node went on without what it held."""

    path: Path
    at_ms: int
    cause: str


@dataclass(frozen=True, slots=True)
class StoredOverride:
    app: str
    instance_id: str
    status: InstanceStatus
    reason: str | None
    set_ms: int
    expires_ms: int | None
    set_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One transaction's worth of changes."""

    upserts: list[LeaseRecord] = field(default_factory=list)
    check_holds: dict[str, HeldDown] = field(default_factory=dict)  # of upserts, by id
    deletes: list[tuple[str, str]] = field(default_factory=list)
    overrides_set: list[StoredOverride] = field(default_factory=list)
    overrides_gone: list[str] = field(default_factory=list)  # instance ids
    tombstones: list[Tombstone] = field(default_factory=list)  # of the instances deleted
    # Admins' checks by application, each as its row's document (registry/codec/checks.py).
    app_checks: dict[str, dict[str, object]] = field(default_factory=dict)
    # Every change the overrides went through, in order: the history's rows.
    history: list[OverrideChange] = field(default_factory=list)
    index: int = 0
    epoch: str = ""
    everything: bool = False  # the whole registry: replace what the store holds


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a warm restart restores."""

    instances: list[InstanceInfo]
    overrides: list[StoredOverride]
    index: int
    epoch: str | None
    registered_ms: int | None = None  # instances were read as registered at this time
    renewals: list[int] = field(default_factory=list)  # each instance's last renewal written
    renewing: list[bool] = field(default_factory=list)  # whether each had been renewed
    check_holds: dict[str, HeldDown] = field(default_factory=dict)  # by instance id
    tombstones: list[Tombstone] = field(default_factory=list)
    # Overrides removed (deleted, expired) and not set again: (instance id, app, when).
    override_removals: list[tuple[str, str, int]] = field(default_factory=list)
    # The media types full documents were last read in (see Catalog.keep_warm)
    read_formats: list[str] = field(default_factory=list)
    app_checks: list[AppCheck] = field(default_factory=list)
    app_check_removals: list[tuple[str, int]] = field(default_factory=list)  # (app, when)


class Store:
    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self._writing = asyncio.Lock()  # one transaction at a time on the one connection
        self.path = path
        self.moved_aside: MovedAside | None = None  # the corrupt file this one replaced

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        now_ms: int,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        refuse_corrupt: bool = False,
    ) -> Store:
        """The store at `path`, created, migrated, or replaced when corrupt (the corrupt file
        kept aside, and named in `moved_aside`); with `refuse_corrupt`, CorruptStore instead."""
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        try:
            return await cls._open(path, busy_timeout_ms)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):  # locked, unreadable: not corruption
                raise
            if refuse_corrupt:
                raise CorruptStore(
                    f"{path} is not a sound database ({exc}); it is left as it is "
                    "(store.refuse_corrupt = true)"
                ) from None
            aside = path.with_name(f"{path.name}.corrupt-{now_ms}")
            log.error(
                "store_corrupt_moved_aside", path=str(path), moved_to=str(aside), cause=str(exc)
            )
            await asyncio.to_thread(_move_aside, path, aside)
            store = await cls._open(path, busy_timeout_ms)
            store.moved_aside = MovedAside(aside, now_ms, str(exc))
            return store

    @classmethod
    async def _open(cls, path: Path, busy_timeout_ms: int) -> Store:
        connecting = asyncio.ensure_future(_connect(path))
        try:
            db = await asyncio.shield(connecting)
        except BaseException:
            # Cancelled (a start stopped by a signal): the connection is made in aiosqlite's
            # thread all the same; wait for it and close it, or that thread finishes after the
            # event loop has closed, and fails there.
            with contextlib.suppress(Exception):
                await (await connecting).close()
            raise
        try:
            await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await _check_integrity(db)
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = FULL")
            await _migrate(db, path)
        except BaseException:
            await db.close()
            raise
        return cls(db, path)

    async def close(self) -> None:
        await self._db.close()

    # Reading -------------------------------------------------------------------------------

    async def load(self, *, registered_ms: int | None = None) -> Snapshot:
        """What the store holds. A row that cannot be read is skipped with a log line: one bad
        row must not cost the rest (nor stop the start-up). With `registered_ms`, instances
        come as registering them at that time leaves them (see `record.decode`)."""
        instances, renewals, renewing, holds = [], [], [], dict[str, HeldDown]()
        # Only what is read back: at 100 000 rows, the app and id columns' strings cost more
        # than the documents' (0.2 s against 0.08); a bad row's are looked up for its log line.
        for rowid, doc, renewed_ms, renewed, hold in await self._db.execute_fetchall(
            "SELECT rowid, doc, last_renewal_ms, renewed, check_hold FROM instances"
        ):
            try:
                instance = _instance(doc, registered_ms)
                instances.append(instance)
                renewals.append(renewed_ms)
                renewing.append(bool(renewed))
                if hold is not None:
                    _take_hold(holds, instance, hold)
            except (BadInput, ValueError) as exc:
                named = await self._db.execute_fetchall(
                    "SELECT app, id FROM instances WHERE rowid = ?", (rowid,)
                )
                app, iid = next(iter(named))
                log.error(
                    "store_row_unreadable", table="instances", app=app, id=iid, cause=str(exc)
                )
        overrides = []
        for app, iid, status, reason, set_ms, expires_ms, by in await self._db.execute_fetchall(
            "SELECT app, id, status, reason, set_ms, expires_ms, set_by FROM overrides"
        ):
            try:
                known = InstanceStatus(status)
            except ValueError as exc:
                log.error(
                    "store_row_unreadable", table="overrides", app=app, id=iid, cause=str(exc)
                )
                continue
            overrides.append(StoredOverride(app, iid, known, reason, set_ms, expires_ms, by))
        tombstones = [
            Tombstone(app, iid, dirty_ms, at_ms, bool(expired))
            for app, iid, dirty_ms, at_ms, expired in await self._db.execute_fetchall(
                "SELECT app, id, dirty_ms, at_ms, expired FROM tombstones"
            )
        ]
        # The last removal of each override not in force: what peers' older ones lose to.
        removals = [
            (iid, app, at_ms)
            for iid, app, at_ms in await self._db.execute_fetchall(
                "SELECT id, app, max(at_ms) FROM override_history "
                "WHERE action IN ('deleted', 'expired') "
                "AND id NOT IN (SELECT id FROM overrides) GROUP BY id"
            )
        ]
        app_checks, app_check_removals = await self._app_checks()
        rows = await self._db.execute_fetchall("SELECT key, value FROM meta")
        meta: dict[str, str] = {key: value for key, value in rows}
        index, epoch = int(meta.get("index", 0)), meta.get("epoch")
        return Snapshot(
            instances,
            overrides,
            index,
            epoch,
            registered_ms,
            renewals=renewals,
            renewing=renewing,
            check_holds=holds,
            tombstones=tombstones,
            override_removals=removals,
            read_formats=[f for f in meta.get(READ_FORMATS, "").split(",") if f],
            app_checks=app_checks,
            app_check_removals=app_check_removals,
        )

    async def _app_checks(self) -> tuple[list[AppCheck], list[tuple[str, int]]]:
        checks, removals = [], []
        for app, doc in await self._db.execute_fetchall("SELECT app, doc FROM app_checks"):
            try:
                fields = orjson.loads(doc)
                if isinstance(fields, dict) and "removedAt" in fields:
                    removals.append(app_check_removal_from_fields(fields))
                else:
                    checks.append(app_check_from_fields(fields))
            except (BadInput, ValueError) as exc:
                log.error("store_row_unreadable", table="app_checks", app=app, cause=str(exc))
        return checks, removals

    async def history(
        self, *, since_ms: int = 0, after: int = 0, limit: int = 1000
    ) -> tuple[list[dict[str, object]], int | None]:
        """The override audit trail from `since_ms`, oldest first: `limit` changes after the
        one numbered `after`, and the number to go on after (None: no more)."""
        rows = list(
            await self._db.execute_fetchall(
                "SELECT seq, at_ms, action, app, id, status, reason, expires_ms, actor "
                "FROM override_history WHERE at_ms >= ? AND seq > ? ORDER BY seq LIMIT ?",
                (since_ms, after, limit + 1),
            )
        )
        keys = ("at_ms", "action", "app", "instance_id", "status", "reason", "expires_ms", "by")
        page = [dict(zip(keys, row[1:], strict=True)) for row in rows[:limit]]
        return page, (int(rows[limit - 1][0]) if len(rows) > limit else None)

    # Writing -------------------------------------------------------------------------------

    async def write(self, batch: Batch) -> None:
        """Everything in `batch`, in one transaction: all of it is written, or none.

        With `batch.everything`, the batch is the whole registry: what the store holds beyond
        it is removed (a store that comes back after missing changes is rewritten).
        """
        # Encoded in a thread: a large batch (a registration storm, a full rewrite) would hold
        # the event loop for as long as it takes.
        rows = await asyncio.to_thread(_rows, batch.upserts, batch.check_holds)
        deletes = orjson.dumps(batch.deletes)
        tombstones = orjson.dumps(
            [(t.app, t.instance_id, t.dirty_ms, t.at_ms, t.expired) for t in batch.tombstones]
        )
        async with self._transaction() as db:
            if batch.everything:
                await db.execute("DELETE FROM instances")
                await db.execute("DELETE FROM overrides")
                await db.execute("DELETE FROM tombstones")
                await db.execute("DELETE FROM app_checks")
            # One statement over a JSON array rather than executemany: SQLite then runs the
            # whole batch without taking Python's GIL back for each row, which a busy event
            # loop would make it wait for, 5 ms at a time.
            await db.execute(
                "INSERT OR REPLACE INTO instances "
                "(app, id, doc, registration_ms, service_up_ms, last_renewal_ms, check_hold, "
                "renewed) SELECT value->>0, value->>1, value->>2, value->>3, value->>4, "
                "value->>5, value->>6, value->>7 FROM json_each(?)",
                (rows,),
            )
            # An instance back is no longer removed; one removed leaves its tombstone.
            await db.execute(
                "DELETE FROM tombstones WHERE (app, id) IN "
                "(SELECT value->>0, value->>1 FROM json_each(?))",
                (rows,),
            )
            await db.execute(
                "DELETE FROM instances WHERE (app, id) IN "
                "(SELECT value->>0, value->>1 FROM json_each(?))",
                (deletes,),
            )
            await db.execute(
                "INSERT OR REPLACE INTO tombstones "
                "SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM json_each(?)",
                (tombstones,),
            )
            for override in batch.overrides_set:
                await db.execute(
                    "INSERT OR REPLACE INTO overrides "
                    "(id, app, status, reason, set_ms, expires_ms, set_by) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        override.instance_id,
                        override.app,
                        override.status.value,
                        override.reason,
                        override.set_ms,
                        override.expires_ms,
                        override.set_by,
                    ),
                )
            await db.executemany(
                "DELETE FROM overrides WHERE id = ?", [(iid,) for iid in batch.overrides_gone]
            )
            if batch.history:
                await db.executemany(
                    "INSERT INTO override_history "
                    "(at_ms, action, app, id, status, reason, expires_ms, actor) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [_history_row(change) for change in batch.history],
                )
                await db.execute(  # by its key: the oldest rows beyond the cap go
                    "DELETE FROM override_history "
                    "WHERE seq <= (SELECT max(seq) FROM override_history) - ?",
                    (HISTORY_ROWS,),
                )
            await db.executemany(
                "INSERT OR REPLACE INTO app_checks VALUES (?, ?)",
                [(app, orjson.dumps(doc).decode()) for app, doc in batch.app_checks.items()],
            )
            await db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [("index", str(batch.index)), ("epoch", batch.epoch)],
            )

    async def forget_history(self, *, before_ms: int) -> None:
        async with self._transaction() as db:
            await db.execute("DELETE FROM override_history WHERE at_ms < ?", (before_ms,))

    async def remember_read_formats(self, formats: Iterable[str]) -> None:
        """The media types full documents are being read in, for a restart to prepare."""
        async with self._transaction() as db:
            await db.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", (READ_FORMATS, ",".join(formats))
            )

    async def forget_tombstones(self, *, before_ms: int) -> None:
        """Purge removals past their retention (registry/core/tombstones.py)."""
        async with self._transaction() as db:
            await db.execute("DELETE FROM tombstones WHERE at_ms < ?", (before_ms,))

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when the block raises."""
        async with self._writing:
            try:
                # Inside the try: a BEGIN cancelled while it waits for a lock still runs in
                # aiosqlite's thread, and must be rolled back too.
                await self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                await self._db.execute("COMMIT")
            except BaseException:  # the block or the commit failed (a full disk fails there)
                with contextlib.suppress(sqlite3.Error):
                    await self._db.execute("ROLLBACK")
                raise


async def _connect(path: Path) -> aiosqlite.Connection:
    return await aiosqlite.connect(path, isolation_level=None)  # transactions are explicit


def _instance(doc: bytes | str, registered_ms: int | None) -> InstanceInfo:
    """A row's instance: the compact form, or a wire document from before it."""
    if doc[:1] in ("[", b"["):
        return record.decode(doc, registered_ms=registered_ms)
    return wire.instance_from_wire(orjson.loads(doc), now_ms=0)


def _take_hold(holds: dict[str, HeldDown], instance: InstanceInfo, stored: str) -> None:
    """A row's check hold; a damaged one is dropped (logged), not the instance with it."""
    try:
        held = held_from_item(orjson.loads(stored))
    except (BadInput, ValueError) as exc:
        log.error(
            "store_hold_unreadable", app=instance.app, id=instance.instance_id, cause=str(exc)
        )
        return
    if held is not None:
        holds[instance.instance_id] = held


def _rows(leases: list[LeaseRecord], holds: dict[str, HeldDown]) -> bytes:
    """The instances as one JSON array of rows [app, id, record, registration, service up,
    last renewal, check hold (JSON text, or null), renewed]."""
    return orjson.dumps(
        [
            (
                lease.instance.app,
                lease.instance.instance_id,
                orjson.Fragment(record.encode(lease.instance)),
                lease.registration_ms,
                lease.service_up_ms,
                lease.last_renewal_ms,
                _hold(holds.get(lease.instance.instance_id)),
                lease.renewed,
            )
            for lease in leases
        ]
    )


def _hold(held: HeldDown | None) -> str | None:
    return None if held is None else orjson.dumps(held_fields(held)).decode()


def _history_row(change: OverrideChange) -> tuple[object, ...]:
    """A history row: what happened, and the override in force afterwards (none when gone)."""
    note = change.note
    return (
        change.at_ms,
        change.action.value,
        change.app,
        change.instance_id,
        None if change.status is None else change.status.value,
        None if note is None else note.reason,
        None if note is None else note.expires_ms,
        change.by,
    )


async def _check_integrity(db: aiosqlite.Connection) -> None:
    """Raise DatabaseError when the file is not a sound SQLite database."""
    rows = list(await db.execute_fetchall("PRAGMA quick_check"))
    if [tuple(row) for row in rows] != [("ok",)]:
        raise sqlite3.DatabaseError(f"integrity check failed: {rows[:3]}")


async def _migrate(db: aiosqlite.Connection, path: Path) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    rows = list(await db.execute_fetchall("SELECT version FROM schema_version"))
    version = rows[0][0] if rows else 0
    if version > schema.VERSION:
        raise NewerSchema(
            f"{path} has schema version {version}, newer than this server's {schema.VERSION}: "
            "it was written by a newer server; run that, or move the file away to start empty"
        )
    for step in range(version + 1, schema.VERSION + 1):
        await db.execute("BEGIN IMMEDIATE")
        try:
            for statement in schema.MIGRATIONS[step]:
                await db.execute(statement)
            await db.execute("DELETE FROM schema_version")
            await db.execute("INSERT INTO schema_version VALUES (?)", (step,))
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
    if version < schema.VERSION:
        log.info("store_migrated", path=str(path), from_version=version, version=schema.VERSION)


def _move_aside(path: Path, aside: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        source = path.with_name(path.name + suffix)
        if source.exists():
            source.rename(aside.with_name(aside.name + suffix))
