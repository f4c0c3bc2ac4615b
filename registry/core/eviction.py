"""The eviction task: remove leases that stopped renewing, a capped random share at a time.

Each sweep asks self-preservation whether eviction may run, finds the expired leases, and evicts
at most `max_fraction` of the registry (15 %, Eureka's cap), chosen at random so that no
application loses all its instances first. While self-preservation applies, the cap counts
every sweep of the last minute (self-preservation's `window`, so the two never disagree):
Eureka sweeps once a minute, and renewals are counted by the minute, so eviction must not
outrun the count that would hold it. Scanning and evicting give the event loop a turn every
millisecond of work, so even 100 000 expired leases never hold up heartbeats; each lease is
checked again when its turn comes, since it may have renewed.

A sweep that runs late (a stalled loop, a suspended VM) adds its lateness to every lease's
grace, so instances that kept renewing are never evicted for the server's own delay.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator

import structlog

from registry.common.clock import Clock
from registry.common.tasks import SLICE, Pacer
from registry.core.model import InstanceInfo, Lease
from registry.core.preservation import SelfPreservation
from registry.core.registry import Registry

log = structlog.get_logger()


class Evictor:
    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        preservation: SelfPreservation,
        *,
        interval: float,
        max_fraction: float = 0.15,
        rng: random.Random | None = None,
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._preservation = preservation
        self._interval = interval
        self._max_fraction = max_fraction
        self._rng = rng or random.Random()
        self._last_run = clock.monotonic()
        self._recent: deque[tuple[float, int]] = deque()  # (when, how many) in the last window

    def limit(self, size: int) -> int:
        """How many leases one sweep may evict from a registry of `size` (contract 8, step 4)."""
        return size - int(size * (1 - self._max_fraction))

    def _budget(self, size: int, now: float, per_minute: bool) -> int:
        while self._recent and self._recent[0][0] <= now - self._preservation.window:
            self._recent.popleft()
        spent = sum(count for _, count in self._recent) if per_minute else 0
        return max(0, self.limit(size) - spent)

    async def sweep(self) -> int:
        """One eviction run; returns how many leases went."""
        now = self._clock.monotonic()
        lateness = max(0.0, now - self._last_run - self._interval)
        self._last_run = now
        size = len(self._registry)
        verdict = self._preservation.judge(size)
        if self._preservation.note(verdict, now):
            if verdict.evict:
                log.info("eviction_resumed", reason=verdict.reason)
            else:
                log.warning("eviction_held", reason=verdict.reason)
        if not verdict.evict:
            return 0
        now_ms, extra_ms = self._clock.wall_ms(), int(lateness * 1000)
        pacer = Pacer()
        expired: list[Lease] = []
        for leases in self._slices():
            expired.extend(lease for lease in leases if lease.is_expired(now_ms, extra_ms))
            await pacer.pace()
        if not expired:
            return 0
        budget = self._budget(size, now, per_minute=verdict.guarding)
        evicted = 0
        for i in range(min(len(expired), budget)):
            # Partial Fisher-Yates, as Eureka: expired[:i] are the ones picked so far.
            j = self._rng.randrange(i, len(expired))
            expired[i], expired[j] = expired[j], expired[i]
            instance = expired[i].instance
            evicted += self._registry.evict(
                instance.app, instance.instance_id, now_ms=now_ms, extra_ms=extra_ms
            )
            if i % 8 == 7:  # each eviction logs and tells four listeners: look at the time often
                await pacer.pace()
        self._recent.append((now, evicted))
        log.info(
            "eviction_ran",
            evicted=evicted,
            expired=len(expired),
            budget=budget,
            lateness_ms=extra_ms,
            loop_turns=pacer.yields,
        )
        return evicted

    async def recount(self) -> None:
        """Self-preservation's periodic recount, with the renewing leases when it needs them."""
        now, now_ms = self._clock.monotonic(), self._clock.wall_ms()
        renewing: list[InstanceInfo] = []
        if self._preservation.needs_live_count(now):
            pacer = Pacer()
            for leases in self._slices():
                renewing.extend(
                    lease.instance
                    for lease in leases
                    if self._preservation.renews_recently(lease, now_ms)
                )
                await pacer.pace()
        self._preservation.recount(now=now, now_ms=now_ms, renewing=renewing)
        log.info(
            "renewal_threshold_recount",
            result=self._preservation.last_recount,
            expected_clients=self._preservation.expected_clients,
            threshold=self._preservation.threshold,
        )

    def end_minute(self) -> None:
        """The end of a window of counting renewals: every `preservation.window` seconds."""
        self._preservation.end_minute(self._registry.renewals)

    def _slices(self) -> Iterator[list[Lease]]:
        """The registry's leases in slices; copied first, since it changes between slices."""
        for name in list(self._registry.application_names()):
            leases = list(self._registry.application(name))
            for start in range(0, len(leases), SLICE):
                yield leases[start : start + SLICE]
