"""Running the server process: start, serve until SIGTERM or SIGINT, stop.

On the signal, with `server.shutdown_delay`, the node first says it is leaving (`/readyz` answers
503) and serves everything as before for that long: an orchestrator takes a moment after the
signal to stop routing to it (Kubernetes updates a pod's endpoints only then), and requests
routed meanwhile are answered, not refused. A second signal ends the delay. Then it drains.

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
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson
import structlog
from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from registry.appkeys import CONNECTIONS, LIFECYCLE, SETTINGS
from registry.http.connections import Connections, raise_file_limit
from registry.http.error_handling import error_response
from registry.http.ratelimit import client_key
from registry.lifecycle import Phase

log = structlog.get_logger()

# How long an idle keep-alive connection is kept open (aiohttp's `run_app` gives 75 s; its
# runner alone, an hour).
KEEPALIVE_TIMEOUT = 75.0

# How aiohttp's server handles every connection; the tests' in-process servers run the same.
# Once draining, a request still running is given this long, then cancelled (aiohttp's own
# default is a minute): long-polls and watch streams end at once anyway, and the stop must fit
# in Kubernetes' grace period after `server.shutdown_delay`, with replication owed and the store's
# flush still to come.
SHUTDOWN_TIMEOUT = 5.0

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
    before, after = raise_file_limit()  # a connection is a file: take what the system allows
    if after != before:
        log.info("file_limit_raised", before=before, after=after)
    loop = asyncio.get_running_loop()
    stopping, again = asyncio.Event(), asyncio.Event()

    def signalled() -> None:
        (again if stopping.is_set() else stopping).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled)
    runner = Runner(
        app,
        handle_signals=False,
        access_log=access_log,
        keepalive_timeout=KEEPALIVE_TIMEOUT,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
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
        await _leave(app, again)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)  # a second signal ends the process at once
        await runner.cleanup()  # the contexts entered so far exit, the last entered first


async def _leave(app: web.Application, again: asyncio.Event) -> None:
    """Serve on, not ready, for `server.shutdown_delay` (or until a second signal), if this node
    was serving: one that never was has no routes to wait for."""
    delay, lifecycle = app[SETTINGS].server.shutdown_delay, app[LIFECYCLE]
    if delay <= 0 or lifecycle.phase is not Phase.SERVING:
        return
    lifecycle.leave(f"shutting down: serving for {delay:g} s more while routes move away")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(again.wait(), delay)


async def _start(runner: web.AppRunner, host: str, port: int, backlog: int) -> None:
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=backlog).start()


class Runner(web.AppRunner):
    """aiohttp's runner, whose connections are counted and capped by client address, must send
    a request head in time (registry/http/connections.py), have what aiohttp's parser refuses
    answered in JSON, and have their handlers cancelled when their clients go."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        super().__init__(app, **(SERVER_OPTIONS | kwargs))
        self._connections = app[CONNECTIONS]
        self._head_timeout = app[SETTINGS].limits.request_head_timeout

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the one hook for the connections' handler class
        assert isinstance(server, _Server)
        server.by_address = self._connections
        server.head_timeout = self._head_timeout
        server.request_handler = _no_tunnels(server.request_handler)
        return server


def _no_tunnels(
    handle: Callable[[BaseRequest], Awaitable[web.StreamResponse]],
) -> Callable[[BaseRequest], Awaitable[web.StreamResponse]]:
    """`handle`, but a CONNECT is refused in JSON and its connection closed: its target is
    no path, so no route (not even the catch-all) would answer it, and aiohttp reads no body
    for it, so bytes sent as one would be read as the next request on the connection (a
    request smuggled past a proxy that reuses its connections)."""

    async def handled(request: BaseRequest) -> web.StreamResponse:
        if request.method == hdrs.METH_CONNECT:
            response = error_response(405, "method_not_allowed", "CONNECT is not served here")
            response.force_close()
            return response
        return await handle(request)

    return handled


class _Server(Server):
    by_address: Connections
    head_timeout: float

    async def shutdown(self, timeout: float | None = None) -> None:
        """Wait for the requests still running, up to `timeout`; say which they were, so a
        stop that takes that long is explained in the log."""
        running = [
            f"{request.method} {request.path}"
            for connection in self._connections
            if (request := connection._current_request) is not None
        ]
        if running:
            log.info("shutdown_waits_for_requests", requests=running[:10], count=len(running))
        await super().shutdown(timeout)

    def __call__(self) -> RequestHandler:
        return _Connection(self, loop=self._loop, **self._kwargs)


class _Connection(RequestHandler):
    """One client connection: admitted under its address's cap, closed when it leaves a
    request head unfinished for `head_timeout` (from its opening, or from the first byte of
    a request after one was answered: an idle keep-alive connection waits its own timeout),
    and its parser's refusals answered in JSON.

    An address is counted as the fetch limiter counts it (an IPv6 client by its /64). Reads
    three of aiohttp's attributes, `_request_count` (heads parsed), `_current_request` (a
    handler running) and `_messages` (heads waiting for one); tests/test_serving.py fails if
    they change."""

    def __init__(self, manager: _Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._connections = manager.by_address
        self._head_timeout = manager.head_timeout
        self._address: str | None = None  # once admitted
        self._head_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        address = client_key(str(peer[0]) if peer else None)
        if not self._connections.admit(address):
            transport.close()
            return
        self._address = address
        self._expect_head()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._address is not None:
            self._connections.release(self._address)
            self._address = None
        self._head_arrived()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        heads = self._request_count
        super().data_received(data)
        if self._request_count > heads:
            self._head_arrived()
        elif self._current_request is None and not self._messages:
            self._expect_head()  # bytes of a next request, or of a body nobody reads

    def _expect_head(self) -> None:
        if self._head_due is None and self._address is not None:
            self._head_due = self._loop.call_later(self._head_timeout, self._head_late)

    def _head_arrived(self) -> None:
        if self._head_due is not None:
            self._head_due.cancel()
            self._head_due = None

    def _head_late(self) -> None:
        self._head_due = None
        if self._address is not None:
            self._connections.head_timed_out(self._address)
        self.force_close()

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
