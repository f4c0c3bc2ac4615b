"""Background loops (one core call per tick, errors logged and survived; loops kept running by
`Loops`), and pacing long work."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Hashable

import structlog

from registry.common.clock import Clock

log = structlog.get_logger()

SLICE = 256  # items handled between two looks at the time
# Seconds of work before the loop gets a turn. The loop runs the resumed work again before the
# I/O that came in meanwhile, so others wait up to about two budgets.
BUDGET = 0.001
PASSES = 3  # see in_passes
RESTART_PAUSE = 1.0  # before a background loop that died runs again; doubles each time
RESTART_PAUSE_MAX = 60.0


async def run_every(
    clock: Clock, interval: float, tick: Callable[[], object | Awaitable[object]], *, name: str
) -> None:
    """Call `tick` (and await what it returns, if anything) every `interval` seconds until
    cancelled; a failing tick does not stop it."""
    while True:
        await clock.sleep(interval)
        try:
            result = tick()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception(f"{name}_failed")


class Loops:
    """The background loops of one part of the server, started and stopped together.

    Each runs as a task named for it. One that dies (its code raised rather than ended) is
    logged with the error and started again after a pause that doubles up to
    RESTART_PAUSE_MAX, so a bug costs a log line a minute rather than the loop for good; one
    that ends (a start-up sync done) is not. `stop` cancels them all and waits for them, as
    leaving `async with Loops(clock) as loops:` does.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []

    def every(
        self, interval: float, tick: Callable[[], object | Awaitable[object]], *, name: str
    ) -> None:
        """Call `tick` every `interval` seconds (see `run_every`)."""
        self.start(lambda: run_every(self._clock, interval, tick, name=name), name=name)

    def start(self, run: Callable[[], Awaitable[None]], *, name: str) -> None:
        """Run `run()` in a task named `name`, again (after a pause) each time it dies."""
        self._tasks.append(asyncio.create_task(self._kept(run, name), name=name))

    async def _kept(self, run: Callable[[], Awaitable[None]], name: str) -> None:
        pause = RESTART_PAUSE
        while True:
            try:
                await run()
                return
            except Exception:
                log.exception("background_loop_died", loop=name, restart_in=pause)
            await self._clock.sleep(pause)
            pause = min(RESTART_PAUSE_MAX, pause * 2)

    async def __aenter__(self) -> Loops:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        for task in self._tasks:  # all at once: a stop cancelled while it waits leaves none
            task.cancel()
        for task in self._tasks:  # each once: a second cancel would cut its cleanup short
            await _stopped(task)
        self._tasks.clear()

    @property
    def names(self) -> list[str]:
        """The loops running now."""
        return [task.get_name() for task in self._tasks if not task.done()]


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel a background task and wait for it, swallowing only its own cancellation: a caller
    cancelled while it waits (a task may take a while to stop) ends cancelled too, rather than
    carrying on as if only the task had been."""
    task.cancel()
    await _stopped(task)


async def _stopped(task: asyncio.Task[None]) -> None:
    """Wait for a cancelled task to end; its cancellation swallowed, the caller's not."""
    current = asyncio.current_task()
    cancels = current.cancelling() if current is not None else 0
    try:
        await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > cancels:
            raise
        return
    # A task that swallowed its cancellation wakes its waiter as if nothing had been cancelled,
    # even one that was (asyncio forwards the waiter's cancel to the task it waits for).
    if current is not None and current.cancelling() > cancels:
        raise asyncio.CancelledError


async def wait_set(clock: Clock, event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass on `clock`; whether it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()


class Pacer:
    """Gives the event loop a turn whenever `budget` seconds of work have gone by, so long
    work (a sweep of 100 000 leases, a stream's backlog) never holds up other requests."""

    def __init__(self, budget: float = BUDGET) -> None:
        self._budget = budget
        self._since = time.perf_counter()
        self.yields = 0

    async def pace(self) -> bool:
        """Give the loop a turn if the budget is spent; whether it did (time went by)."""
        if time.perf_counter() - self._since < self._budget:
            return False
        await asyncio.sleep(0)
        self.yields += 1
        self._since = time.perf_counter()
        return True


async def in_passes(missing: Callable[[], list[str]], do: Callable[[str], Awaitable[None]]) -> None:
    """`do` each thing `missing` lists, then again for what it lists after, up to PASSES
    times: a paced preparation takes seconds when cold at 100 000 instances, and changes undo
    some of its work meanwhile. What is left after the last pass is done by whoever reads."""
    for _ in range(PASSES):
        todo = missing()
        if not todo:
            return
        for key in todo:
            await do(key)


class Shared:
    """At most one run of a job per key at a time: who asks while one is under way waits for
    that run instead of starting another. Thirty clients preparing the same cold document each
    in their own task made every turn of the loop thirty slices long (a stall for everyone);
    one shared run takes one slice per turn."""

    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[None]] = {}

    async def run(self, key: Hashable, job: Callable[[], Awaitable[None]]) -> None:
        running = self._running.get(key)
        if running is None or running.done():
            running = self._running[key] = asyncio.ensure_future(job())
            running.add_done_callback(lambda done: self._finished(key, done))
        # Shielded: a waiter that goes away must not cancel the run the others wait for.
        await asyncio.shield(running)

    def _finished(self, key: Hashable, done: asyncio.Future[None]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled():
            done.exception()  # seen here, so a run whose waiters all left is not reported
