"""A node of ours whose peer is a stock Eureka server: it copies the registry at start and
converges by anti-entropy without our digest and removal endpoints (peers/stock.py).

The stock server here is one of our nodes seen through a proxy that takes away what a stock
server lacks (our endpoints answer Spring Boot's 404, our headers are gone); the real stock
server meets our node in tests/http/test_eureka_differential.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from peers.anti_entropy import SETTLE
from peers.stock import our_digest, their_digest
from registry import FakeClock, Settings, create_app
from registry.appkeys import CLUSTER, LIFECYCLE
from registry.errors import UnknownInstance
from tests.helpers import eventually
from tests.peers.apps import (
    AiohttpClient,
    AiohttpServer,
    has,
    register_on,
    registry,
    replicated,
)

_OURS_ONLY = ("/eureka/peerreplication/digest", "/eureka/peerreplication/removed")
NODE = web.AppKey("node", TestServer)  # the node of ours behind the stock-shaped proxy
_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


def stock_shaped(upstream: str, session: aiohttp.ClientSession) -> web.Application:
    """`upstream` (a node of ours) answering as a stock Eureka server does."""

    async def forward(request: web.Request) -> web.Response:
        if request.path.startswith(_OURS_ONLY):
            return web.json_response(
                {"status": 404, "error": "Not Found", "path": request.path}, status=404
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        async with session.request(
            request.method, upstream + request.path_qs, headers=headers, data=await request.read()
        ) as answer:
            body = await answer.read()
            kept = {
                k: v
                for k, v in answer.headers.items()
                if not k.lower().startswith("x-registry") and k.lower() not in _DROPPED
            }
            return web.Response(status=answer.status, body=body, headers=kept)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


@pytest.fixture
async def stock_peer(
    aiohttp_server: AiohttpServer, clock: FakeClock
) -> AsyncIterator[Callable[[], Awaitable[TestServer]]]:
    """Makes stock-shaped peers; the node of ours (with no peers) behind one is
    `peer.app[NODE]`. Its leases expire as Eureka's do (a renewal stored a duration ahead),
    as its registry then shows."""
    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def make() -> TestServer:
            settings = Settings.of(store__enabled=False, leases__legacy_expiry=True)
            node = await aiohttp_server(create_app(settings, clock=clock))
            proxy = stock_shaped(str(node.make_url("")).rstrip("/"), session)
            proxy[NODE] = node
            return await aiohttp_server(proxy)

        yield make


@pytest.fixture
async def stock(stock_peer: Callable[[], Awaitable[TestServer]]) -> TestServer:
    return await stock_peer()


async def test_a_node_copies_a_stock_peer_and_opens_reads(
    aiohttp_client: AiohttpClient, stock: TestServer, clock: FakeClock
) -> None:
    """With the default sync settings: the copy is the stock peer's registry, an admin's
    override included. Before, the node asked for our removal and digest endpoints, got 404,
    copied nothing and kept its reads closed for up to five minutes."""
    node_b = stock.app[NODE]
    for iid in ("o-1", "o-2"):
        await register_on(node_b, "ORDERS", iid)
    async with aiohttp.ClientSession() as session:
        put = node_b.make_url("/eureka/apps/ORDERS/o-2/status?value=OUT_OF_SERVICE")
        assert 200 == (await session.put(put)).status
    settings = Settings.of(store__enabled=False, peers__urls=(str(stock.make_url("/eureka/")),))
    node: TestClient = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: node.app[LIFECYCLE].serves_reads, what="reads open")
    assert has(node, "o-1") and has(node, "o-2")
    assert {"o-2": "OUT_OF_SERVICE"} == dict(registry(node).overrides)
    assert "stock Eureka" in node.app[LIFECYCLE].reason
    [peer] = node.app[CLUSTER].clients()
    assert peer.stock


async def test_a_node_copies_every_stock_peer(
    aiohttp_client: AiohttpClient,
    stock_peer: Callable[[], Awaitable[TestServer]],
    clock: FakeClock,
) -> None:
    """A stock server serves reads before it has copied its own peers (its start-up sync
    runs beside its listener, and waits between tries): the first peer to answer may answer
    an empty registry. Before, the node copied that one alone and opened its reads empty."""
    restarting, running = await stock_peer(), await stock_peer()
    await register_on(running.app[NODE], "ORDERS", "o-1")
    peers = tuple(str(peer.make_url("/eureka/")) for peer in (restarting, running))
    node: TestClient = await aiohttp_client(
        create_app(Settings.of(store__enabled=False, peers__urls=peers), clock=clock)
    )
    await eventually(lambda: node.app[LIFECYCLE].serves_reads, what="reads open")
    assert has(node, "o-1")


async def test_what_replication_missed_is_pulled_from_a_stock_peer(
    aiohttp_client: AiohttpClient, stock: TestServer, clock: FakeClock
) -> None:
    """An instance only the stock peer holds reaches our node in the anti-entropy rounds
    after an interval, compared by the peer's registry (it has no digest to give)."""
    settings = Settings.of(store__enabled=False, peers__urls=(str(stock.make_url("/eureka/")),))
    node: TestClient = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: node.app[LIFECYCLE].serves_reads, what="reads open")
    await register_on(stock.app[NODE], "ORDERS", "only-on-stock")
    await clock.advance(30)
    for _ in range(5):  # each step a round's real round trips, then the clock
        await asyncio.sleep(0.05)
        if has(node, "only-on-stock"):
            break
        await clock.advance(SETTLE)
    else:
        raise AssertionError("not pulled in the rounds after the interval")


async def test_copies_live_while_the_stock_peer_renews_them(
    aiohttp_client: AiohttpClient, stock: TestServer, clock: FakeClock
) -> None:
    """Until the stock nodes list this node as a peer, no heartbeat reaches it: each round
    renews the copies by the stock peer's lease info (a renewal stored a duration ahead, as
    Eureka keeps it), so a copy whose client heartbeats there lives here, and one whose client
    stopped runs out as it does there. Before, every copy ran out here after its duration,
    live or not."""
    node_b = stock.app[NODE]
    for iid in ("alive", "stopped"):
        await register_on(node_b, "ORDERS", iid)
    settings = Settings.of(store__enabled=False, peers__urls=(str(stock.make_url("/eureka/")),))
    node: TestClient = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: node.app[LIFECYCLE].serves_reads, what="reads open")
    async with aiohttp.ClientSession() as session:
        for _ in range(5):  # 150 s: past the 90 s lease of a copy renewed nowhere
            beat = await session.put(node_b.make_url("/eureka/apps/ORDERS/alive"))
            assert 200 == beat.status
            await clock.advance(30)
            round_ms = clock.wall_ms()  # the renewal there, stored 90 s ahead, is past this
            await eventually(
                lambda: registry(node).application("ORDERS"),
                lambda leases, at=round_ms: any(lease.last_renewal_ms == at for lease in leases),
                what="the round renews the copy as the stock peer keeps it",
            )
    now_ms = clock.wall_ms()
    assert registry(node).get("ORDERS", "alive", now_ms=now_ms).last_renewal_ms == now_ms
    with pytest.raises(UnknownInstance):
        registry(node).get("ORDERS", "stopped", now_ms=now_ms)


async def test_an_override_a_stock_peer_lost_is_sent_to_it_again(
    aiohttp_client: AiohttpClient, stock: TestServer, clock: FakeClock
) -> None:
    """A stock node forgets overrides when it restarts (it copies only the instances that are
    UP): the rounds after an interval find ours missing there and replicate it again."""
    node_b = stock.app[NODE]
    await register_on(node_b, "ORDERS", "o-1")
    settings = Settings.of(store__enabled=False, peers__urls=(str(stock.make_url("/eureka/")),))
    node: TestClient = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: node.app[LIFECYCLE].serves_reads, what="reads open")
    put = await node.put("/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE&reason=disk")
    assert 200 == put.status
    await replicated(node, clock)
    assert {"o-1": "OUT_OF_SERVICE"} == dict(registry(node_b).overrides)
    async with aiohttp.ClientSession() as session:  # what ours sees of a restart there
        gone = await session.delete(node_b.make_url("/eureka/apps/ORDERS/o-1/status"))
        assert 200 == gone.status
    assert {} == dict(registry(node_b).overrides)
    await clock.advance(30)
    for _ in range(5):  # each step a round's real round trips, then the clock
        await asyncio.sleep(0.05)
        await replicated(node, clock)
        if dict(registry(node_b).overrides):
            break
        await clock.advance(SETTLE)
    assert {"o-1": "OUT_OF_SERVICE"} == dict(registry(node_b).overrides)


async def test_a_stock_peers_application_digests_as_ours_does(stock: TestServer) -> None:
    """The same instances, statuses, overrides and lastDirtyTimestamps digest the same from
    the peer's JSON as from our leases (else every round would merge every application), and
    differently once one of them changes."""
    node_b = stock.app[NODE]
    await register_on(node_b, "ORDERS", "o-1")
    await register_on(node_b, "ORDERS", "o-2")
    url = stock.make_url("/eureka/apps/ORDERS")

    async def theirs() -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers={"Accept": "application/json"}) as r,
        ):
            return their_digest((await r.json())["application"])

    assert our_digest(registry(node_b).application("ORDERS")) == await theirs()
    before = await theirs()
    async with aiohttp.ClientSession() as session:
        put = node_b.make_url("/eureka/apps/ORDERS/o-2/status?value=OUT_OF_SERVICE")
        assert 200 == (await session.put(put)).status
    assert our_digest(registry(node_b).application("ORDERS")) == await theirs() != before
