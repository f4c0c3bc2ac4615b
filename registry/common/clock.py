"""The one source of time. Nothing else reads the system clock or sleeps for a fixed time.

`SystemClock` serves production (and freezegun with `real_asyncio=True`); `FakeClock` lets tests
move time: `await clock.advance(300)` runs every timer that falls due, in order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Epoch milliseconds, for timestamps clients see."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, for intervals."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Call `callback` in `seconds` (from the event loop), unless the timer is cancelled:
        a timeout that costs no task, for what thousands wait on at once (long-polls)."""
        ...


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)


class _FakeTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_735_689_000_000) -> None:
        self._start_ms = start_ms
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None] | _FakeTimer]] = []
        self._order = itertools.count()

    def wall_ms(self) -> int:
        return self._start_ms + round(self._elapsed * 1000)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), future))
        await future

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        timer = _FakeTimer(callback)
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), timer))
        return timer

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking each sleeper at its own deadline and letting it run."""
        target = self._elapsed + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, due = heapq.heappop(self._sleepers)
            self._elapsed = max(self._elapsed, deadline)
            if isinstance(due, _FakeTimer):
                if not due.cancelled:
                    due.callback()
                    await _let_others_run()
            elif not due.done():
                due.set_result(None)
                await _let_others_run()
        self._elapsed = target
        await _let_others_run()


async def _let_others_run() -> None:
    # A woken task needs one loop turn to resume and another to reach its next await.
    for _ in range(3):
        await asyncio.sleep(0)
