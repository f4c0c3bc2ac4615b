"""The fake clock wakes sleepers at their own deadlines, in order."""

from __future__ import annotations

import asyncio

from registry import FakeClock, SystemClock


async def test_advance_wakes_each_sleeper_at_its_deadline():
    """Two periodic sleepers see time move in their own steps."""
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []

    async def every(name: str, seconds: float) -> None:
        while True:
            await clock.sleep(seconds)
            seen.append((name, clock.wall_ms()))

    tasks = [asyncio.create_task(every("fast", 2)), asyncio.create_task(every("slow", 5))]
    await asyncio.sleep(0)
    await clock.advance(10)
    for task in tasks:
        task.cancel()
    assert [
        ("fast", 2000),
        ("fast", 4000),
        ("slow", 5000),
        ("fast", 6000),
        ("fast", 8000),
        ("slow", 10000),
        ("fast", 10000),
    ] == seen
    assert (10_000, 10.0) == (clock.wall_ms(), clock.monotonic())


def test_system_clock_reads_wall_time_in_milliseconds():
    """SystemClock gives epoch milliseconds."""
    assert SystemClock().wall_ms() > 1_700_000_000_000
