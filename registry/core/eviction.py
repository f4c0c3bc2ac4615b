"""The eviction task: remove leases that stopped renewing, as self-preservation allows.

Each sweep finds the expired leases, tells self-preservation what they weigh, asks it whether
eviction may run, and evicts at most `max_fraction` of the registry (15 %, Eureka's cap), chosen
at random so that no application loses all its instances first, those a peer has evicted first
(so that nodes evicting under their caps evict the same instances). While self-preservation
applies, the cap counts every sweep of the last counting window (self-preservation's `window`,
so the two never disagree): Eureka sweeps once a minute, and renewals are counted by the
minute, so eviction must not outrun the count that would hold it.

At each window's end the task counts every lease for self-preservation (`end_window`), and at
the first window's end after each recount interval, recounts. Sweeps and counts take turns
(one lock), and each gives the event loop a turn every millisecond of work, so even 100 000
leases never hold up heartbeats; each lease picked is checked again when its turn comes, since
it may have renewed.

A sweep that runs late (a stalled loop, a suspended VM) adds its lateness to every lease's
grace, so instances that kept renewing are never evicted for the server's own delay.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import AsyncIterator, Iterator

import structlog

from registry.common.clock import Clock
from registry.common.tasks import SLICE, Loops, Pacer
from registry.core.model import Lease
from registry.core.preservation import SelfPreservation, forget, renews_recently, weight
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
        self._last_recount = clock.monotonic()
        self._recent: deque[tuple[float, int]] = deque()  # (when, how many) in the last window
        self._turns = asyncio.Lock()  # a sweep and a count never interleave

    async def running(self) -> AsyncIterator[None]:
        """While the server runs: a sweep every interval, and the renewals counted at the end
        of every window, which self-preservation judges the sweeps by. Timed from the start
        (a warm restart may take seconds after the evictor was made)."""
        self._last_run = self._last_recount = self._clock.monotonic()
        async with Loops(self._clock) as loops:
            loops.every(self._interval, self.sweep, name="eviction")
            loops.every(self._preservation.window, self.end_window, name="renewal_count")
            yield

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
        async with self._turns:
            return await self._sweep()

    async def _sweep(self) -> int:
        sp, registry = self._preservation, self._registry
        now = self._clock.monotonic()
        lateness = max(0.0, now - self._last_run - self._interval)
        self._last_run = now
        now_ms, extra_ms = self._clock.wall_ms(), int(lateness * 1000)
        pacer = Pacer()
        first: list[Lease] = []  # expired, evicted by a peer, and not renewed since
        rest: list[Lease] = []  # the other expired
        window_ms, on_peers, lost = sp.window_ms, registry.expired_on_peers, 0.0
        weigh = sp.enabled  # what expired weighs matters to self-preservation alone
        for leases in self._slices():
            found = [lease for lease in leases if lease.is_expired(now_ms, extra_ms)]
            if weigh:
                lost += sum(weight(lease, window_ms) for lease in found)
            if on_peers:
                for lease in found:
                    key = (lease.instance.app, lease.instance.instance_id)
                    (first if on_peers.get(key) == lease.last_renewal_ms else rest).append(lease)
            else:
                rest.extend(found)
            await pacer.pace()
        expired = len(first) + len(rest)
        sp.found_expired(expired, lost, len(first))
        size = len(registry)
        verdict = sp.judge(size)
        if sp.note(verdict, now):
            if verdict.evict:
                log.info("eviction_resumed", reason=verdict.reason)
            else:
                log.warning("eviction_held", reason=verdict.reason)
        if not verdict.evict or not expired:
            return 0
        budget = self._budget(size, now, per_minute=verdict.guarding)
        evicted = 0
        for i, lease in enumerate(self._pick(first, rest, budget)):
            instance, weighed = lease.instance, weight(lease, window_ms)
            if registry.evict(instance.app, instance.instance_id, now_ms=now_ms, extra_ms=extra_ms):
                evicted += 1
                sp.evicted(weighed)
            if i % 8 == 7:  # each eviction logs and tells four listeners: look at the time often
                await pacer.pace()
        self._recent.append((now, evicted))
        log.info(
            "eviction_ran",
            evicted=evicted,
            expired=expired,
            expired_on_peers=len(first),
            budget=budget,
            lateness_ms=extra_ms,
            loop_turns=pacer.yields,
        )
        return evicted

    def _pick(self, first: list[Lease], rest: list[Lease], budget: int) -> Iterator[Lease]:
        """Up to `budget` leases at random, those of `first` before those of `rest` (a partial
        Fisher-Yates, as Eureka: only as many draws as are taken)."""
        for pool in (first, rest):
            for i in range(min(len(pool), budget)):
                j = self._rng.randrange(i, len(pool))
                pool[i], pool[j] = pool[j], pool[i]
                yield pool[i]
            budget -= min(len(pool), budget)

    async def end_window(self) -> None:
        """The end of a counting window (every `preservation.window` seconds): every lease is
        counted, and, once a recount interval has passed since the last, the recount."""
        async with self._turns:
            sp = self._preservation
            tally, pacer = sp.tally(), Pacer()
            for leases in self._slices():
                for lease in leases:
                    tally.add(lease)
                await pacer.pace()
            sp.end_window(tally)
            now = self._clock.monotonic()
            if now - self._last_recount >= sp.recount_interval:
                self._last_recount = now
                await self._recount(now, pacer)

    async def _recount(self, now: float, pacer: Pacer) -> None:
        sp = self._preservation
        if sp.needs_live_count(now):
            now_ms, silent, silent_weight = self._clock.wall_ms(), 0, 0.0
            for leases in self._slices():
                for lease in leases:
                    lost = weight(lease, sp.window_ms)
                    if lost and not renews_recently(lease, now_ms):
                        silent, silent_weight = silent + 1, silent_weight + lost
                        forget(lease)
                await pacer.pace()
            sp.lasting_drop(now=now, silent=silent, silent_weight=silent_weight)
        else:
            sp.recount()
        log.info(
            "renewal_threshold_recount",
            result=sp.last_recount,
            expected_clients=sp.expected_clients(),
            threshold=sp.threshold(),
        )

    def _slices(self) -> Iterator[list[Lease]]:
        """The registry's leases in slices; copied first, since it changes between slices."""
        for name in list(self._registry.application_names()):
            leases = list(self._registry.application(name))
            for start in range(0, len(leases), SLICE):
                yield leases[start : start + SLICE]
