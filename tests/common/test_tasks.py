"""Background loops: named, started again after a growing pause when they die, stopped
together; time moved by a fake clock."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from registry.common.clock import FakeClock
from registry.common.tasks import RESTART_PAUSE, Loops


async def test_a_loop_that_dies_is_started_again_after_a_pause_that_grows():
    clock, runs = FakeClock(), []

    async def dies() -> None:
        runs.append(clock.monotonic())
        raise RuntimeError("a bug")

    loops = Loops(clock)
    with capture_logs() as logs:
        loops.start(dies, name="flaky")
        await asyncio.sleep(0)
        await clock.advance(RESTART_PAUSE)
        await clock.advance(2 * RESTART_PAUSE)
        await clock.advance(RESTART_PAUSE)  # the next pause is 4: not yet
        await loops.stop()
    assert [0.0, RESTART_PAUSE, 3 * RESTART_PAUSE] == runs
    died = [e for e in logs if e["event"] == "background_loop_died"]
    assert [("flaky", 1.0), ("flaky", 2.0), ("flaky", 4.0)] == [
        (e["loop"], e["restart_in"]) for e in died
    ]


async def test_a_loop_that_ends_is_not_started_again_and_stop_ends_the_rest():
    clock, ticks = FakeClock(), []
    loops = Loops(clock)

    async def once() -> None:
        return None

    loops.start(once, name="sync")
    loops.every(1.0, lambda: ticks.append(clock.monotonic()), name="tick")
    await asyncio.sleep(0)
    await clock.advance(2.0)
    assert ["tick"] == loops.names
    await loops.stop()
    await clock.advance(5.0)
    assert [1.0, 2.0] == ticks
    assert [] == loops.names
