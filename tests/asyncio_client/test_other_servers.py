"""`DiscoveryClient` against servers that answer otherwise than ours does: our real server,
in process, behind a middleware that makes it answer as such a server would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from registry import Settings, SystemClock, create_app
from registry.appkeys import REGISTRY
from registry.client import DiscoveryClient, InstanceStatus, Unavailable
from tests.helpers import eventually, instance_doc

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
FAST = {"renewal_interval": 1, "lease_duration": 10, "fetch_interval": 0.3}


async def serve(aiohttp_server, middleware: Middleware, **settings: bool) -> str:
    """Our server behind `middleware` (the outermost: it sees every answer last); its URL."""
    app = create_app(Settings.of(store__enabled=False, **settings), clock=SystemClock())
    app.middlewares.insert(0, web.middleware(middleware))
    server: TestServer = await aiohttp_server(app, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}/eureka/"


async def test_a_stock_eureka_server_is_polled_for_deltas(aiohttp_server):
    """A server that sends no index headers (a stock Eureka server) gets Eureka's own
    polling: neither a watch nor a long-poll is tried, deltas are merged every interval."""
    asked: list[str] = []

    async def stock(request: web.Request, handler: Handler) -> web.StreamResponse:
        asked.append(request.path_qs)
        response = await handler(request)
        for header in ("X-Registry-Index", "X-Registry-Epoch", "X-Registry-Since"):
            response.headers.popall(header, None)
        return response

    url = await serve(aiohttp_server, stock, reads__watch=False, reads__long_poll=False)
    async with DiscoveryClient(url, app="orders", port=8080, **FAST) as client:
        assert "delta" == client.sync_mode
        async with aiohttp.ClientSession() as session:
            body = {"instance": instance_doc("BILLING", "b-1")}
            async with session.post(url + "apps/BILLING", json=body) as response:
                assert 204 == response.status
        await client.wait_for("billing", timeout=5)
        await client.wait_for("orders", timeout=5)
        assert 0 == client.stats.resyncs
    assert not [path for path in asked if "watch" in path or "index=" in path]
    assert 1 <= sum(path == "/eureka/apps/delta" for path in asked)


async def test_a_409_to_a_heartbeat_registers_again_with_a_newer_record(aiohttp_server):
    """A server holding a newer record of the instance (409) gets it registered again, with
    a newer lastDirtyTimestamp: the instance owns its record."""
    conflicts = []

    async def newer(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "PUT" and request.path.startswith("/eureka/apps/") and not conflicts:
            conflicts.append(request.query["lastDirtyTimestamp"])
            return web.json_response({"error": "stale"}, status=409)
        return await handler(request)

    url = await serve(aiohttp_server, newer)
    async with DiscoveryClient(url, app="orders", port=8080, **FAST) as client:
        first = client.instance.last_dirty_ms
        await eventually(lambda: client.stats.registrations, lambda n: n == 2, timeout=5)
        assert [str(first)] == conflicts
        assert first < client.instance.last_dirty_ms
        await eventually(lambda: client.stats.heartbeats, lambda n: n >= 1, timeout=5)


async def register_on(url: str, app: str, iid: str) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"instance": instance_doc(app, iid)}
        async with session.post(f"{url}apps/{app}", json=body) as response:
            assert 204 == response.status


async def test_a_broken_stream_is_resumed_where_it_stopped(aiohttp_server):
    """A watch connection cut mid-stream (a proxy's reset) is opened again with the last
    event's id, on the same server: no full fetch, nothing missed."""
    streams: list[web.Request] = []

    async def watched(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.endswith("/watch"):
            streams.append(request)
        return await handler(request)

    url = await serve(aiohttp_server, watched)
    async with DiscoveryClient(url, register=False) as client:
        await register_on(url, "ORDERS", "o-1")
        await client.wait_for("orders", timeout=5)
        assert streams[-1].transport is not None
        streams[-1].transport.close()  # cut: no end of the chunked body
        await eventually(lambda: len(streams), lambda n: n == 2, what="the stream again")
        await register_on(url, "BILLING", "b-1")
        await client.wait_for("billing", timeout=5)
        assert 1 == client.stats.full_fetches
        index, _, epoch = streams[1].headers["Last-Event-ID"].partition("@")
        assert ("1", streams[0].app[REGISTRY].epoch) == (index, epoch)


async def test_a_stream_reset_again_and_again_is_fetched_in_full_ever_more_slowly(aiohttp_server):
    """A server whose stream is reset every time (a proxy spreading calls over nodes of other
    runs) gets full fetches with growing pauses between them, not a tight loop."""

    async def resetting(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.endswith("/watch"):
            return await handler(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'event: reset\ndata: {"error": "index_expired"}\n\n')
        return response

    url = await serve(aiohttp_server, resetting)
    with capture_logs() as logs:
        async with DiscoveryClient(url, register=False) as client:
            await eventually(lambda: client.stats.resyncs, lambda n: n >= 3, timeout=5)
    pauses = [e["retry_in"] for e in logs if e["event"] == "registry_resync"][:3]
    assert 0 == pauses[0]  # the first at once: one reset is no sign of a loop
    assert 0.25 <= pauses[1] <= 0.5  # then growing, jittered: 0.5 s and 1 s, times 0.5-1
    assert 0.5 <= pauses[2] <= 1.0


async def test_streams_ending_before_their_first_event_fall_back_to_long_polls(aiohttp_server):
    """Streams that end before their first event, three in a row, leave the watch for the
    long-poll, which this server serves; they are not reopened for ever."""
    ended = []

    async def not_streams(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.endswith("/watch"):
            return await handler(request)
        ended.append(request.path)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        return response  # ended at once

    url = await serve(aiohttp_server, not_streams)
    async with DiscoveryClient(url, register=False) as client:
        await eventually(lambda: client.sync_mode, lambda m: m == "long_poll", timeout=10)
        assert 3 == len(ended)
        await register_on(url, "ORDERS", "o-1")
        await client.wait_for("orders", timeout=5)
        assert 1 == client.stats.full_fetches


async def test_a_page_instead_of_a_stream_falls_back_at_once(aiohttp_server):
    """A 200 of another content type is no stream: the long-poll is used from then on."""

    async def page(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.endswith("/watch"):
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        return await handler(request)

    url = await serve(aiohttp_server, page)
    async with DiscoveryClient(url, register=False) as client:
        await eventually(lambda: client.sync_mode, lambda m: m == "long_poll", timeout=5)
        assert (0, 1) == (client.stats.failovers, client.stats.full_fetches)


async def test_a_throttled_watch_is_no_failover(aiohttp_server):
    """A 429 is the server asking to wait, not failing: the client stays with it."""
    refused = []

    async def throttled(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.endswith("/watch") and not refused:
            refused.append(request.path)
            return web.json_response(
                {"error": "too_many_requests"}, status=429, headers={"Retry-After": "1"}
            )
        return await handler(request)

    first = await serve(aiohttp_server, throttled)
    second = await serve(aiohttp_server, throttled)
    async with DiscoveryClient(f"{first},{second}", register=False) as client:
        await eventually(lambda: len(refused), lambda n: n == 1)
        await register_on(first, "ORDERS", "o-1")
        await client.wait_for("orders", timeout=5)
        assert (0, first) == (client.stats.failovers, client.server)


async def test_leaving_is_bounded_when_the_server_hangs(aiohttp_server):
    """With a status change hanging on a server that stopped answering, leaving waits for
    neither it nor every try on every server: the connect and read timeouts, once."""
    hang = asyncio.Event()

    held: list[str] = []

    async def hanging(request: web.Request, handler: Handler) -> web.StreamResponse:
        if hang.is_set() and request.method in ("POST", "DELETE"):
            held.append(request.method)
            await asyncio.Event().wait()
        return await handler(request)

    first = await serve(aiohttp_server, hanging)
    second = await serve(aiohttp_server, hanging)
    client = DiscoveryClient(
        f"{first},{second}", app="orders", port=8080, connect_timeout=0.5, read_timeout=0.5
    )
    await client.__aenter__()
    await eventually(lambda: client.stats.registrations, lambda n: n == 1)
    hang.set()
    changing = asyncio.ensure_future(client.set_status(InstanceStatus.DOWN))
    await eventually(lambda: held, lambda methods: methods == ["POST"], what="a held change")
    loop = asyncio.get_running_loop()
    leaving = loop.time()
    await asyncio.wait_for(client.aclose(), 10)
    assert loop.time() - leaving < 1.5  # one second of timeouts, not every try's
    with contextlib.suppress(Unavailable):
        await changing
