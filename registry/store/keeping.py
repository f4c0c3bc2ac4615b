"""The store's part in the server's run: the data directory held, the registry restored from it
before anything else runs, its changes written behind until shutdown.

One process per data directory (lock.py), for as long as it runs. The writer (writer.py) joins
the registry's subscribers before the restore, which tells of overrides the store's table lacks
(see `Registry.load`); the restore (restore.py) runs with collections paused, since nothing
else allocates meanwhile. While the server runs, changes are flushed every `flush_interval`, the
override history and the tombstones past their retention are forgotten hourly, and which
formats clients read is remembered, so that a restart encodes those first.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from registry.codec import Format
from registry.common.clock import Clock
from registry.common.tasks import Loops
from registry.core.registry import Registry
from registry.health import heap
from registry.lifecycle import Lifecycle, Phase
from registry.reads.catalog import Catalog
from registry.reads.journal import DeltaJournal
from registry.settings import Settings
from registry.store.lock import lock_data_dir
from registry.store.restore import restore, restore_missing
from registry.store.sqlite import Snapshot
from registry.store.writer import InstanceKey, StoreWriter

HOUR = 3600.0
READ_FORMATS_INTERVAL = 10.0  # seconds between looks at which formats to remember for a restart


class StoreKeeping:
    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        registry: Registry,
        journal: DeltaJournal,
        catalog: Catalog,
        lifecycle: Lifecycle,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._registry = registry
        self._journal = journal
        self._catalog = catalog
        self._lifecycle = lifecycle
        self.writer = StoreWriter(
            Path(settings.store.data_dir) / "registry.db",
            registry,
            clock,
            late_restore=self._late_restore,
            busy_timeout_ms=int(settings.store.busy_timeout * 1000),
            refuse_corrupt=settings.store.refuse_corrupt,
        )
        self.restored = 0  # instances the warm restart brought back
        self._remembered: list[Format] = []  # the formats written down as read

    def lost(self) -> str:
        """Why the store held nothing to restore though there is one ("" if it did or may have:
        a new store)."""
        if self.writer.moved_aside is not None:
            return f"it was corrupt, and is kept aside at {self.writer.moved_aside.path}"
        if self.writer.degraded:
            return f"it cannot be opened: {self.writer.last_error}"
        return ""

    async def running(self) -> AsyncIterator[None]:
        """The store for the server's run: restored from, then written to until shutdown."""
        held = await asyncio.to_thread(lock_data_dir, Path(self._settings.store.data_dir))
        try:
            self._registry.subscribe(self.writer)
            await self._restore()
            async with Loops(self._clock) as loops:
                loops.every(
                    self._settings.store.flush_interval,
                    self.writer.flush_logged,
                    name="store_flush",
                )
                loops.every(HOUR, self._forget_old_history, name="override_history")
                loops.every(READ_FORMATS_INTERVAL, self._remember_read_formats, name="read_formats")
                yield
            await self.writer.close()  # what is owed is written first
        finally:
            os.close(held)

    async def _restore(self) -> None:
        writer, lifecycle, clock = self.writer, self._lifecycle, self._clock
        lifecycle.move(Phase.RESTORING, f"reading {writer.path}")
        with heap.collections_paused(then_freeze=self._settings.server.gc_freeze_interval > 0):
            snapshot = await writer.open()  # None: unavailable; degraded until a flush opens it
            if snapshot is not None:
                self.restored = restore(
                    self._registry, self._journal, snapshot, now_ms=clock.wall_ms()
                )
                lifecycle.move(
                    Phase.RESTORING, f"restored {self.restored} instances from {writer.path}"
                )
                formats = [fmt for fmt in Format if fmt.value in snapshot.read_formats]
                self._catalog.expect_reads(formats, now=clock.monotonic())

    def _late_restore(self, snapshot: Snapshot, removed: set[InstanceKey], gone: set[str]) -> None:
        restore_missing(self._registry, snapshot, removed, gone, now_ms=self._clock.wall_ms())
        self._lifecycle.synced("the store opened late, and what it kept is restored")

    async def _forget_old_history(self) -> None:
        now_ms, settings = self._clock.wall_ms(), self._settings
        await self.writer.forget_history(
            before_ms=now_ms - int(settings.store.override_history_retention * 1000)
        )
        await self.writer.forget_tombstones(
            before_ms=now_ms - int(settings.leases.tombstone_retention * 1000)
        )

    async def _remember_read_formats(self) -> None:
        """Write down the formats being read, whenever they change."""
        formats = self._catalog.read_formats(now=self._clock.monotonic())
        if formats != self._remembered:
            await self.writer.remember_read_formats(fmt.value for fmt in formats)
            self._remembered = formats
