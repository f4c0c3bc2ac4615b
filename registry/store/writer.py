"""The write-behind writer: the registry's changes reach the store in batches, off the request path.

It subscribes to the registry's change events and keeps, per instance, only the newest state
(or its removal), so a burst of changes to one instance is one row written. Overrides are
compared with those last written at each flush, which catches them however they changed (an
admin's call, a peer's, a cancel). Every flush (a
fraction of a second apart, and at once when an admin's override must be on disk before it is
acknowledged) writes what is pending in one transaction. Heartbeats are not changes and are
never written: a restored lease gets a full fresh duration instead.

A store that fails never fails the registry: what could not be written stays pending (newer
changes replace it), the failure is logged once per episode with its cause, the writer reports
itself degraded, and each later flush tries again until the store is back.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from registry.clock import Clock
from registry.core import Registry
from registry.errors import UnknownInstance
from registry.model import ActionType, ChangeEvent, InstanceStatus, LeaseSnapshot
from registry.store.sqlite import Batch, OverrideGone, Store, StoredOverride

log = structlog.get_logger()

InstanceKey = tuple[str, str]


class StoreWriter:
    def __init__(self, store: Store, registry: Registry, clock: Clock) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._instances: dict[InstanceKey, LeaseSnapshot | None] = {}  # None: removed
        self._overrides: dict[str, StoredOverride | OverrideGone] = {}  # by instance id
        self._written_overrides: dict[str, InstanceStatus] = {}  # as the store has them
        self._flushing = asyncio.Lock()  # one flush at a time, so a retry never overtakes
        self.failing_since: float | None = None  # monotonic seconds
        self.last_error: str | None = None
        self.batches = 0
        self.failures = 0

    @property
    def degraded(self) -> bool:
        return self.failing_since is not None

    @property
    def pending(self) -> int:
        return len(self._instances) + len(self._overrides)

    def status(self) -> dict[str, object]:
        """For `GET status`: whether writes reach the disk, and what waits."""
        return {
            "enabled": True,
            "path": str(self._store.path),
            "degraded": self.degraded,
            "last-error": self.last_error,
            "pending": self.pending,
            "batches": self.batches,
            "failures": self.failures,
        }

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: remember the newest state of the instance."""
        instance = event.lease.instance
        key = (instance.app, instance.instance_id)
        self._instances[key] = None if event.action is ActionType.DELETED else event.lease

    def restored(self, overrides: list[StoredOverride]) -> None:
        """The overrides the store held at start: only changes from these are written."""
        self._written_overrides = {o.instance_id: o.status for o in overrides}

    def override_set(self, override: StoredOverride) -> None:
        self._overrides[override.instance_id] = override

    def override_gone(self, gone: OverrideGone) -> None:
        self._overrides[gone.instance_id] = gone

    def _compare_overrides(self) -> None:
        """Queue the overrides that differ from those written."""
        now_ms = self._clock.wall_ms()
        current = self._registry.overrides()
        for iid, status in current.items():
            if self._written_overrides.get(iid) is not status and iid not in self._overrides:
                app = self._app_of(iid)
                self._overrides[iid] = StoredOverride(app, iid, status, None, now_ms, None)
        for iid in self._written_overrides.keys() - current.keys():
            if iid not in self._overrides:
                self._overrides[iid] = OverrideGone(self._app_of(iid), iid, now_ms)

    def _app_of(self, instance_id: str) -> str:
        try:
            return self._registry.find(instance_id, now_ms=0).instance.app
        except UnknownInstance:
            return ""

    async def flush(self) -> None:
        """Write everything pending in one transaction; on failure keep it for the next try.

        Raises the store's error, so that a caller who must know (an override's
        acknowledgement) does; the flush loop logs and goes on.
        """
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        self._compare_overrides()
        if not self._instances and not self._overrides:
            return
        instances, self._instances = self._instances, {}
        overrides, self._overrides = self._overrides, {}
        batch = Batch(
            upserts=[lease for lease in instances.values() if lease is not None],
            deletes=[key for key, lease in instances.items() if lease is None],
            overrides_set=[o for o in overrides.values() if isinstance(o, StoredOverride)],
            overrides_gone=[o for o in overrides.values() if isinstance(o, OverrideGone)],
            index=self._registry.index,
            epoch=self._registry.epoch,
        )
        try:
            await self._store.write(batch)
        except Exception as exc:
            # Changes made while the write was under way are newer: they win.
            self._instances = instances | self._instances
            self._overrides = overrides | self._overrides
            self._failed(exc)
            raise
        for override in batch.overrides_set:
            self._written_overrides[override.instance_id] = override.status
        for gone in batch.overrides_gone:
            self._written_overrides.pop(gone.instance_id, None)
        self.batches += 1
        if self.failing_since is not None:
            log.info(
                "store_recovered",
                after_seconds=round(self._clock.monotonic() - self.failing_since, 1),
                failures=self.failures,
            )
            self.failing_since = None

    async def flush_logged(self) -> None:
        """The flush loop's tick: a failure is already logged and counted by `flush`."""
        with contextlib.suppress(Exception):
            await self.flush()

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.failing_since is None:  # once per episode, with its cause
            self.failing_since = self._clock.monotonic()
            log.error("store_failed", cause=self.last_error, pending=self.pending)
