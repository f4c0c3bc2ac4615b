"""Running the server process: start, serve until SIGTERM or SIGINT, stop.

aiohttp's `run_app` leaves a start that fails or is interrupted half done: the cleanup
contexts already entered (the lifecycle, the store writer) never exit, so the store is left
open with its writes owed, and its thread finds the event loop closed. Here whatever the start
reached is stopped, in reverse order, however it ended: a signal during the restore, a store
refused at start-up, a port already taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web

# How long an idle keep-alive connection is kept open (aiohttp's `run_app` gives 75 s; its
# runner alone, an hour).
KEEPALIVE_TIMEOUT = 75.0


async def serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    backlog: int,
    access_log: logging.Logger | None,
) -> None:
    """Serve `app` on host:port until SIGTERM or SIGINT; raises what made the start fail."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    runner = web.AppRunner(
        app, handle_signals=False, access_log=access_log, keepalive_timeout=KEEPALIVE_TIMEOUT
    )
    try:
        start = asyncio.ensure_future(_start(runner, host, port, backlog))
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait((start, stop), return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not start.done():  # a signal came first: the start goes no further
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
            return
        start.result()  # a start that failed raises here
        await stopping.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)  # a second signal ends the process at once
        await runner.cleanup()  # the contexts entered so far exit, the last entered first


async def _start(runner: web.AppRunner, host: str, port: int, backlog: int) -> None:
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=backlog).start()
