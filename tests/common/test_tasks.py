"""Background loops: named, started again after a growing pause when they die, stopped
together; time moved by a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from registry.common.clock import FakeClock
from registry.common.tasks import RESTART_PAUSE, Loops, cancel_and_wait


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


async def test_stop_lets_every_loop_finish_its_cleanup():
    """Each loop is cancelled once: a second cancel would cut short a cleanup that awaits (a
    store's last write, a stream's close), and stop cancels them all before waiting for any."""
    loops, cleaned = Loops(FakeClock()), []

    def stopping(name: str, turns: int):
        async def loop() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                for _ in range(turns):  # a cleanup still at it when stop waits for it
                    await asyncio.sleep(0)
                cleaned.append(name)
                raise

        return loop

    for name, turns in (("first", 1), ("second", 5), ("third", 10)):
        loops.start(stopping(name, turns), name=name)
    await asyncio.sleep(0)
    await loops.stop()
    assert ["first", "second", "third"] == cleaned


class TestCancelAndWait:
    async def test_the_tasks_own_cancellation_is_swallowed(self):
        """The caller goes on once the task has ended cancelled."""
        task = asyncio.ensure_future(asyncio.Event().wait())
        await asyncio.sleep(0)  # the task is waiting
        await cancel_and_wait(task)
        assert task.cancelled()

    async def test_a_caller_cancelled_while_it_waits_ends_cancelled(self):
        """The task takes a while to stop; its caller, cancelled meanwhile, does not carry on
        as if only the task had been cancelled."""
        stopping, may_stop = asyncio.Event(), asyncio.Event()
        carried_on = []

        async def slow_to_stop() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                stopping.set()
                await may_stop.wait()  # its clean-up takes a while

        async def caller() -> None:
            task = asyncio.ensure_future(slow_to_stop())
            await asyncio.sleep(0)
            await cancel_and_wait(task)
            carried_on.append(True)

        calling = asyncio.ensure_future(caller())
        await stopping.wait()  # the caller waits for the task to stop
        calling.cancel()
        may_stop.set()
        with pytest.raises(asyncio.CancelledError):
            await calling
        assert (True, []) == (calling.cancelled(), carried_on)

    async def test_a_caller_cancelled_while_a_task_swallows_its_cancellation_ends_cancelled(
        self,
    ):
        """A task that ends normally though cancelled wakes its waiter as if nothing were
        cancelled: the caller's own cancellation still ends it."""
        stopping, may_stop = asyncio.Event(), asyncio.Event()
        carried_on = []

        async def swallows() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopping.set()
                await may_stop.wait()

        async def caller() -> None:
            task = asyncio.ensure_future(swallows())
            await asyncio.sleep(0)
            await cancel_and_wait(task)
            carried_on.append(True)

        calling = asyncio.ensure_future(caller())
        await stopping.wait()
        calling.cancel()
        may_stop.set()
        with pytest.raises(asyncio.CancelledError):
            await calling
        assert (True, []) == (calling.cancelled(), carried_on)
