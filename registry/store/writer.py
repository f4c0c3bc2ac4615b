"""The write-behind writer: the registry's changes reach the store in batches, off the request path.

It subscribes to the registry's change events and keeps, per instance, only the newest state
(or its removal), so a burst of changes to one instance is one row written. Every flush (a
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
from registry.model import ActionType, ChangeEvent, LeaseSnapshot
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

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: remember the newest state of the instance."""
        instance = event.lease.instance
        key = (instance.app, instance.instance_id)
        self._instances[key] = None if event.action is ActionType.DELETED else event.lease

    def override_set(self, override: StoredOverride) -> None:
        self._overrides[override.instance_id] = override

    def override_gone(self, gone: OverrideGone) -> None:
        self._overrides[gone.instance_id] = gone

    async def flush(self) -> None:
        """Write everything pending in one transaction; on failure keep it for the next try.

        Raises the store's error, so that a caller who must know (an override's
        acknowledgement) does; the flush loop logs and goes on.
        """
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
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
