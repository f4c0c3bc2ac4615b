"""Running the server process: start, serve until SIGTERM or SIGINT, stop.

aiohttp's `run_app` leaves a start that fails or is interrupted half done: the cleanup
contexts already entered (the lifecycle, the store writer) never exit, so the store is left
open with its writes owed, and its thread finds the event loop closed. Here whatever the start
reached is stopped, in reverse order, however it ended: a signal during the restore, a store
refused at start-up, a port already taken.

aiohttp answers the requests its parser refuses (a malformed request line, a header too long,
too many headers) itself, in plain text, before any handler or middleware sees them. `Runner`
gives them the JSON error body every other refusal has, and cancels the handler of a request
whose client has gone: a long-poll or a watch stream is let go as soon as its connection
closes, not at the end of its wait (what a command changed before is kept; an admin's
durability wait ends, and the store writes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from http import HTTPStatus
from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

log = structlog.get_logger()

# How long an idle keep-alive connection is kept open (aiohttp's `run_app` gives 75 s; its
# runner alone, an hour).
KEEPALIVE_TIMEOUT = 75.0

# How aiohttp's server handles every connection; the tests' in-process servers run the same.
SERVER_OPTIONS: dict[str, Any] = {
    # A request whose client has gone: its handler is cancelled (see `Runner`).
    "handler_cancellation": True,
    # Bodies are inflated by the handler that reads them, bounded (http/request_body.py);
    # aiohttp would inflate a body nobody reads, after the answer.
    "auto_decompress": False,
    # A body no handler read is drained this long at most (raw), then the connection closes.
    "lingering_time": 2.0,
}


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
    runner = Runner(
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


class Runner(web.AppRunner):
    """aiohttp's runner, whose server answers what aiohttp's parser refuses in JSON and
    cancels the handlers of requests whose clients have gone."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        super().__init__(app, **(SERVER_OPTIONS | kwargs))

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the one hook for the connections' handler class
        return server


class _Server(Server):
    def __call__(self) -> RequestHandler:
        return _JsonRefusals(self, loop=self._loop, **self._kwargs)


class _JsonRefusals(RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The refusal as `{"error": ..., "detail": ...}`; the connection is closed after it,
        as aiohttp does (what follows on it cannot be trusted)."""
        if request.writer.output_size > 0:
            raise ConnectionError("a response is under way: the connection is dropped")
        if status >= 500:
            log.error("request_failed", remote=request.remote, exc_info=exc)
            error, detail = "internal_error", "see the server log"
        else:  # a client's malformed request: one line at debug, not a traceback
            log.debug("request_unreadable", remote=request.remote, status=status, detail=message)
            error, detail = "unreadable_request", message or HTTPStatus(status).phrase
        body = orjson.dumps({"error": error, "detail": detail})
        response = web.Response(status=status, body=body, content_type="application/json")
        response.force_close()
        return response
