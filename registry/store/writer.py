"""The write-behind writer: the registry's changes reach the store in batches, off the request path.

It subscribes to the registry's change events and keeps, per instance, only the newest state
(or its removal), so a burst of changes to one instance is one row written. It subscribes to
the registry's override changes too, however they came (an admin's call, a peer's, an expiry,
a cancel under one): the newest state of each override is its row, and every change is a row
of the override's history. Every flush (a fraction of a second apart, and at once when
an admin's override must be on disk before it is acknowledged) writes what is pending in one
transaction. Heartbeats are not changes and are never written: a restored lease gets a full
grace of a lease's duration instead, and keeps the last renewal written (registry/core/model.py).
An instance removed is written with its tombstone (registry/core/tombstones.py), in the same
transaction as the row's deletion.

A store that fails never fails the registry: what could not be written stays pending (newer
changes replace it), the failure is logged once per episode with its cause, the writer reports
itself degraded, and each later flush tries again. A store that could not be opened, or whose
file went away or was replaced, is opened again by a later flush and then rewritten whole from
the registry, since changes were missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from registry.codec.checks import app_check_fields, app_check_removal_fields
from registry.common.clock import Clock
from registry.core.app_checks import AppCheck
from registry.core.checks import HeldDown
from registry.core.model import (
    ActionType,
    ChangeEvent,
    InstanceStatus,
    Lease,
    LeaseRecord,
    LeaseSnapshot,
)
from registry.core.overrides import Note, OverrideAction, OverrideChange
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from registry.errors import UnknownInstance
from registry.store.sqlite import (
    BUSY_TIMEOUT_MS,
    Batch,
    MovedAside,
    NewerSchema,
    Snapshot,
    Store,
    StoredOverride,
)

log = structlog.get_logger()

InstanceKey = tuple[str, str]
# Called when a store that could not be opened at start-up opens: with what it kept, and the
# instances and overrides this run removed meanwhile (not to be brought back).
LateRestore = Callable[[Snapshot, set[InstanceKey], set[str]], None]
# What a failing store raises: SQLite's errors, the file system's, a closed connection's
# ValueError, and a file a newer server wrote in the meantime.
FAILURES = (sqlite3.Error, OSError, ValueError, NewerSchema)


class StoreWriter(Subscriber):
    def __init__(
        self,
        path: Path,
        registry: Registry,
        clock: Clock,
        *,
        late_restore: LateRestore | None = None,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        refuse_corrupt: bool = False,
    ) -> None:
        self.path = path
        self._registry = registry
        self._clock = clock
        self._busy_timeout_ms = busy_timeout_ms
        self._refuse_corrupt = refuse_corrupt
        # A corrupt file this run moved aside: what it held is not in the registry.
        self.moved_aside: MovedAside | None = None
        self._store: Store | None = None
        self._identity: tuple[int, int] | None = None  # the open file's (device, inode)
        self._rewrite = False  # the store's file was lost: write the whole registry next
        self._late_restore = late_restore
        self._opened_late = False  # not open at start: merge what it kept when it opens
        self._overrides_removed: set[str] = set()  # this run, while the store was not open
        self._instances: dict[InstanceKey, LeaseSnapshot | None] = {}  # None: removed
        self._overrides: dict[str, StoredOverride | None] = {}  # by instance id; None: gone
        self._history: list[OverrideChange] = []
        self._app_checks: dict[str, dict[str, object]] = {}  # by application: its row
        self._flushing = asyncio.Lock()  # one flush at a time, so a retry never overtakes
        self._in_flight = 0  # changes in the transaction under way
        # Changes received, and how many of the first of them are on disk: a caller waiting
        # for its change (`commit`) returns once a flush that took it has written it.
        self._received = 0
        self._written_through = 0
        self.failing_since: float | None = None  # monotonic seconds
        self.last_error: str | None = None
        self.batches = 0
        self.failures = 0

    async def open(self) -> Snapshot | None:
        """Open the store at start-up: what it holds, or None when it cannot be opened now.
        Then the writer is degraded, and the flush that opens it hands what the store kept to
        `late_restore` (without what this run removed meanwhile) before writing.
        A store written by a newer server stops the start-up (NewerSchema), and so does a
        corrupt one when the writer was told to refuse it (CorruptStore)."""
        try:
            store = await self._open(refuse_corrupt=self._refuse_corrupt)
            snapshot = await store.load(registered_ms=self._clock.wall_ms())
        except (sqlite3.Error, OSError) as exc:
            await self._close()
            self._opened_late = True
            self._failed(exc)
            return None
        except BaseException:  # refused, or a start interrupted: nothing is left open
            await self._close()
            raise
        return snapshot

    async def close(self) -> None:
        """Write what is owed, then close."""
        await self.flush_logged()
        await self._close()

    @property
    def degraded(self) -> bool:
        return self.failing_since is not None

    @property
    def pending(self) -> int:
        """Changes not on disk yet, the ones being written included."""
        return len(self._instances) + len(self._history) + self._in_flight

    def status(self) -> dict[str, object]:
        """For `GET status`: whether writes reach the disk, and what waits."""
        return {
            "enabled": True,
            "path": str(self.path),
            "degraded": self.degraded,
            "last-error": self.last_error,
            "pending": self.pending,
            "batches": self.batches,
            "failures": self.failures,
            "corrupt-moved-aside": None
            if self.moved_aside is None
            else {
                "path": str(self.moved_aside.path),
                "at": self.moved_aside.at_ms,
                "cause": self.moved_aside.cause,
            },
        }

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: remember the newest state of the instance."""
        instance = event.lease.instance
        self._received += 1
        self._instances[(instance.app, instance.instance_id)] = (
            None if event.action is ActionType.DELETED else event.lease
        )

    def on_hold(self, lease: Lease) -> None:
        """Registry listener: a check's hold came or went without a change of status; the
        instance's row is written again, with its hold as it now is."""
        instance = lease.instance
        self._received += 1
        self._instances[(instance.app, instance.instance_id)] = lease.snapshot()

    def on_first_renewal(self, lease: Lease) -> None:
        """Registry listener: a lease renewed for the first time; its row is written again,
        so that a restart knows its client renews (core/preservation.py)."""
        instance = lease.instance
        self._received += 1
        self._instances[(instance.app, instance.instance_id)] = lease.snapshot()

    def on_override(self, change: OverrideChange) -> None:
        """Registry listener: the override's newest state is its row (none when gone), and the
        change a row of its history."""
        self._received += 1
        self._history.append(change)
        if change.action is OverrideAction.INSTANCE_CANCELLED:
            return  # the override stays as it was
        iid, status = change.instance_id, change.status
        if status is None:
            self._overrides[iid] = None
            if self._opened_late:  # not to be brought back when the store opens
                self._overrides_removed.add(iid)
        else:
            self._overrides[iid] = _stored(change.app, iid, status, change.note, change.at_ms)

    def on_app_check(self, app: str, check: AppCheck | None) -> None:
        """Registry listener: the application's check, or its removal, is its row."""
        self._received += 1
        self._app_checks[app] = _app_check_row(self._registry, app)

    async def history(
        self, *, since_ms: int = 0, after: int = 0, limit: int = 1000
    ) -> tuple[list[dict[str, object]], int | None]:
        async with self._flushing:  # the flush loop may be (re)opening the store
            store = self._store or await self._opened()
            return await store.history(since_ms=since_ms, after=after, limit=limit)

    async def forget_history(self, *, before_ms: int) -> None:
        async with self._flushing:
            store = self._store or await self._opened()
            await store.forget_history(before_ms=before_ms)

    async def remember_read_formats(self, formats: Iterable[str]) -> None:
        async with self._flushing:
            store = self._store or await self._opened()
            await store.remember_read_formats(formats)

    async def forget_tombstones(self, *, before_ms: int) -> None:
        async with self._flushing:
            store = self._store or await self._opened()
            await store.forget_tombstones(before_ms=before_ms)

    async def flush(self) -> None:
        """Write everything pending in one transaction; on failure keep it for the next try.

        Raises the store's error, so that a caller who must know (an override's
        acknowledgement) does; the flush loop logs and goes on.
        """
        async with self._flushing:
            try:
                await self._flush()
            except FAILURES as exc:
                self._failed(exc)
                raise

    async def commit(self) -> None:
        """Wait until every change made so far is on disk. Callers waiting together share
        flushes: one whose change a flush already took returns when that flush ends, without
        a flush (and its round trips to SQLite's thread) of its own. Raises as `flush`."""
        wanted = self._received
        async with self._flushing:
            if self._written_through >= wanted:
                return
            try:
                await self._flush()
            except FAILURES as exc:
                self._failed(exc)
                raise

    async def flush_logged(self) -> None:
        """The flush loop's tick: a failure is already logged and counted by `flush`."""
        with contextlib.suppress(*FAILURES):
            await self.flush()

    async def _flush(self) -> None:
        if self._store is not None and await self._file_identity() != self._identity:
            log.error("store_file_gone", path=str(self.path))
            await self._close()
            self._rewrite = True
        store = self._store or await self._opened()
        if not (
            self._rewrite or self._instances or self._overrides or self._history or self._app_checks
        ):
            return
        instances, self._instances = self._instances, {}
        overrides, self._overrides = self._overrides, {}
        history, self._history = self._history, []
        app_checks, self._app_checks = self._app_checks, {}
        rewrite, taken = self._rewrite, self._received
        batch = self._whole_registry() if rewrite else self._batch(instances, overrides)
        batch = dataclasses.replace(batch, history=history)
        if not rewrite:
            batch = dataclasses.replace(batch, app_checks=app_checks)
        self._in_flight = len(instances) + len(history)
        write = asyncio.ensure_future(store.write(batch))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            # The transaction runs on in SQLite's thread whatever we do: its end, not the
            # cancel, says whether this batch is written, so history is never written twice.
            await asyncio.wait([write])
            if write.cancelled() or write.exception() is not None:
                self._requeue(instances, overrides, history, app_checks)
            else:
                self._written(rewrite, taken)
            raise
        except BaseException:
            self._requeue(instances, overrides, history, app_checks)
            raise
        self._written(rewrite, taken)

    def _written(self, rewrite: bool, taken: int) -> None:
        self._in_flight = 0
        self._written_through = max(self._written_through, taken)
        self._rewrite = False
        self.batches += 1
        if self.failing_since is not None:
            log.info(
                "store_recovered",
                after_seconds=round(self._clock.monotonic() - self.failing_since, 1),
                failures=self.failures,
                rewritten=rewrite,
            )
            self.failing_since = None

    def _requeue(
        self,
        instances: dict[InstanceKey, LeaseSnapshot | None],
        overrides: dict[str, StoredOverride | None],
        history: list[OverrideChange],
        app_checks: dict[str, dict[str, object]],
    ) -> None:
        """A batch that was not written waits for the next flush; changes made while it was
        under way are newer, and win."""
        self._in_flight = 0
        self._instances = instances | self._instances
        self._overrides = overrides | self._overrides
        self._history = history + self._history
        self._app_checks = app_checks | self._app_checks

    def _batch(
        self,
        instances: dict[InstanceKey, LeaseSnapshot | None],
        overrides: dict[str, StoredOverride | None],
    ) -> Batch:
        deletes = [key for key, lease in instances.items() if lease is None]
        tombstones = self._registry.tombstones
        upserts: list[LeaseRecord] = [lease for lease in instances.values() if lease is not None]
        return Batch(
            upserts=upserts,
            check_holds=self._holds(upserts),
            deletes=deletes,
            tombstones=[t for key in deletes if (t := tombstones.get(*key)) is not None],
            overrides_set=[o for o in overrides.values() if o is not None],
            overrides_gone=[iid for iid, o in overrides.items() if o is None],
            index=self._registry.index,
            epoch=self._registry.epoch,
        )

    def _whole_registry(self) -> Batch:
        now_ms = self._clock.wall_ms()
        upserts: list[LeaseRecord] = list(self._registry.leases())
        return Batch(
            upserts=upserts,
            check_holds=self._holds(upserts),
            overrides_set=[
                self._in_force(iid, status, now_ms)
                for iid, status in self._registry.overrides.items()
            ],
            tombstones=list(self._registry.tombstones),
            app_checks={
                app: _app_check_row(self._registry, app) for app in _checked_apps(self._registry)
            },
            index=self._registry.index,
            epoch=self._registry.epoch,
            everything=True,
        )

    def _holds(self, leases: Iterable[LeaseRecord]) -> dict[str, HeldDown]:
        """The checks' holds on these instances, written with them: a hold comes and goes
        with a change of the instance's status, whose row is written then."""
        checks = self._registry.checks
        if not len(checks):
            return {}
        iids = (lease.instance.instance_id for lease in leases)
        return {iid: held for iid in iids if (held := checks.get(iid)) is not None}

    def _in_force(self, iid: str, status: InstanceStatus, now_ms: int) -> StoredOverride:
        """The row of an override in force, for a rewrite of the whole store."""
        note = self._registry.overrides.notes.of(iid, status)
        if note is not None:
            return _stored(note.app, iid, status, note, now_ms)
        try:
            app = self._registry.find(iid, now_ms=0).instance.app
        except UnknownInstance:
            app = ""
        return _stored(app, iid, status, None, now_ms)

    async def _opened(self) -> Store:
        """The store, opened now; if it could not be at start-up, what it kept is merged in."""
        store = await self._open()
        if self._opened_late:
            try:
                snapshot = await store.load()
                if self._late_restore is not None:
                    removed = {key for key, lease in self._instances.items() if lease is None}
                    self._late_restore(snapshot, removed, self._overrides_removed)
            except BaseException:
                await self._close()  # opened again, and merged, by a later flush
                raise
            self._opened_late = False
            self._overrides_removed = set()
        return store

    async def _open(self, *, refuse_corrupt: bool = False) -> Store:
        store = self._store = await Store.open(
            self.path,
            now_ms=self._clock.wall_ms(),
            busy_timeout_ms=self._busy_timeout_ms,
            refuse_corrupt=refuse_corrupt,
        )
        if store.moved_aside is not None:
            self.moved_aside = store.moved_aside
        self._identity = await self._file_identity()
        return store

    async def _close(self) -> None:
        store, self._store, self._identity = self._store, None, None
        if store is not None:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await store.close()

    async def _file_identity(self) -> tuple[int, int] | None:
        """The database file's (device, inode); None when it is gone."""
        try:
            stat = await asyncio.to_thread(os.stat, self.path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.failing_since is None:  # once per episode, with its cause
            self.failing_since = self._clock.monotonic()
            log.error(
                "store_failed", path=str(self.path), cause=self.last_error, pending=self.pending
            )


def _stored(
    app: str, iid: str, status: InstanceStatus, note: Note | None, at_ms: int
) -> StoredOverride:
    """An override's row: with what the admin said, or set at `at_ms` without a note."""
    if note is None:
        return StoredOverride(app, iid, status, None, at_ms, None)
    return StoredOverride(note.app, iid, status, note.reason, note.set_ms, note.expires_ms, note.by)


def _checked_apps(registry: Registry) -> list[str]:
    """The applications with an admin's check, or with a check removed."""
    return [check.app for check in registry.app_checks] + [
        app for app, _ in registry.app_checks.removals()
    ]


def _app_check_row(registry: Registry, app: str) -> dict[str, object]:
    """The application's check as it is now (a later change than the one told may have come
    meanwhile: the row is the newest), or its removal."""
    check = registry.app_checks.get(app)
    if check is not None:
        return app_check_fields(check)
    return app_check_removal_fields(app, registry.app_checks.removed_at(app) or 0)
