"""The eviction tick: remove leases that stopped renewing (contract 8, without self-preservation).

A tick that runs late (a stalled loop, a suspended VM) adds its lateness to every lease's grace,
so instances that kept renewing are never evicted for the server's own delay.
"""

from __future__ import annotations

import structlog

from registry.clock import Clock
from registry.core import Registry

log = structlog.get_logger()


class Evictor:
    def __init__(self, registry: Registry, clock: Clock, *, interval: float) -> None:
        self._registry = registry
        self._clock = clock
        self._interval = interval
        self._last_run = clock.monotonic()

    def tick(self) -> int:
        now = self._clock.monotonic()
        lateness = max(0.0, now - self._last_run - self._interval)
        self._last_run = now
        evicted = self._registry.evict_expired(
            now_ms=self._clock.wall_ms(), extra_ms=int(lateness * 1000)
        )
        if evicted:
            log.info("eviction_ran", evicted=evicted, lateness_ms=int(lateness * 1000))
        return evicted
