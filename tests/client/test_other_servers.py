"""`DiscoveryClient` against servers that answer otherwise than ours does: our real server,
in process, behind a middleware that makes it answer as such a server would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from registry import Settings, SystemClock, create_app
from registry.client import DiscoveryClient
from tests.helpers import eventually, instance_doc

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
FAST = {"renewal_interval": 1, "lease_duration": 10, "fetch_interval": 0.3}


async def serve(aiohttp_server, middleware: Middleware, **settings: bool) -> str:
    """Our server behind `middleware` (the outermost: it sees every answer last); its URL."""
    app = create_app(Settings(store=False, **settings), clock=SystemClock())
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

    url = await serve(aiohttp_server, stock, watch=False, long_poll=False)
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
