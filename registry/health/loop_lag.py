"""How late the event loop runs what is due: the stall every request waiting behind it feels.

A callback scheduled every `interval` seconds measures by how much it was late. Real loop time
(not the injected clock) is the point: this watches the process, not the registry's time.
Kept for `/metrics`: a histogram of every lateness, and the longest in the last `WINDOW`
seconds, from one maximum per second, so a reading says what happened lately, not at start-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from registry.health.histogram import Histogram

INTERVAL = 0.01  # seconds between two looks
WINDOW = 10  # seconds the recent maximum covers
# Upper bounds, in seconds, of the histogram's buckets.
BOUNDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class LoopLag:
    def __init__(self, interval: float = INTERVAL) -> None:
        self._interval = interval
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self.histogram = Histogram(BOUNDS)  # every lateness, in seconds
        self.longest = 0.0  # seconds, since start
        self._second_max = [0.0] * WINDOW  # by whole second, modulo WINDOW
        self._second_at = [0] * WINDOW

    async def running(self) -> AsyncIterator[None]:
        """Watch the loop while the server runs."""
        self.start()
        yield
        self.stop()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self._interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self.record(max(0.0, now - self._due), now)
        self._due = now + self._interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def record(self, lag: float, now: float) -> None:
        self.histogram.record(lag)
        self.longest = max(self.longest, lag)
        second = int(now)
        slot = second % WINDOW
        if self._second_at[slot] != second:
            self._second_at[slot] = second
            self._second_max[slot] = lag
        elif lag > self._second_max[slot]:
            self._second_max[slot] = lag

    def recent_max(self, now: float) -> float:
        """The longest lateness seen in the last `WINDOW` seconds before `now`."""
        horizon = int(now) - WINDOW
        recent = zip(self._second_max, self._second_at, strict=True)
        return max((lag for lag, at in recent if at > horizon), default=0.0)
