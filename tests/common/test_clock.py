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


async def test_timers_fire_at_their_deadline_among_the_sleepers_unless_cancelled():
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []
    clock.call_later(3, lambda: seen.append(("timer", clock.wall_ms())))
    cancelled = clock.call_later(2, lambda: seen.append(("cancelled", clock.wall_ms())))

    async def sleeper() -> None:
        await clock.sleep(4)
        seen.append(("sleeper", clock.wall_ms()))

    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    cancelled.cancel()
    await clock.advance(5)
    await task
    assert [("timer", 3000), ("sleeper", 4000)] == seen


async def test_system_clock_timers_run_on_the_loop():
    fired, later = asyncio.Event(), asyncio.Event()
    SystemClock().call_later(0, fired.set)
    await asyncio.wait_for(fired.wait(), 5)
    SystemClock().call_later(0, fired.clear).cancel()
    SystemClock().call_later(0.001, later.set)  # due after the cancelled one
    await asyncio.wait_for(later.wait(), 5)
    assert fired.is_set()
