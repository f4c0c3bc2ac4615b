"""Background loops: one sync core call per tick, errors logged and survived."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from registry.clock import Clock

log = structlog.get_logger()


async def run_every(
    clock: Clock, interval: float, tick: Callable[[], object], *, name: str
) -> None:
    """Call `tick` every `interval` seconds until cancelled; a failing tick does not stop it."""
    while True:
        await clock.sleep(interval)
        try:
            tick()
        except Exception:
            log.exception(f"{name}_failed")


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel a background task and wait for it, swallowing only its own cancellation."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
