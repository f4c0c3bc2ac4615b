"""The apps of a replication test, real ones on loopback on one fake clock: what each holds,
the sender's dispatcher, and moving the clock until the sender owes its peer nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from peers.cluster import Cluster
from peers.dispatcher import Dispatcher
from registry import FakeClock
from registry.appkeys import CLUSTER, REGISTRY
from registry.core.registry import Registry
from tests.helpers import instance_doc

AiohttpServer = Callable[[web.Application], Awaitable[TestServer]]
AiohttpClient = Callable[[web.Application], Awaitable[TestClient]]


def dispatcher(node: TestClient) -> Dispatcher:
    """`node`'s dispatcher to its one peer."""
    cluster: Cluster = node.app[CLUSTER]  # type: ignore[index]
    [only] = cluster.dispatchers.values()
    return only


def registry(server: TestServer | TestClient) -> Registry:
    return server.app[REGISTRY]  # type: ignore[index]


def has(server: TestServer, iid: str) -> bool:
    """Whether `server` holds a lease of instance `iid`."""
    return any(lease.instance.instance_id == iid for lease in registry(server).leases())


async def register_on(server: TestServer, app: str = "ORDERS", iid: str = "only-on-b") -> None:
    """A registration made on `server` directly, as its own client's (no peer hears of it)."""
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            server.make_url(f"/eureka/apps/{app}"),
            data=orjson.dumps({"instance": instance_doc(app, iid=iid)}),
            headers={"Content-Type": "application/json"},
        )
        assert 204 == response.status


async def replicated(node: TestClient, clock: FakeClock) -> None:
    """Move time in small steps until A owes B nothing (each batch needs real round trips)."""
    d = dispatcher(node)
    for _ in range(200):
        await clock.advance(0.1)
        if d.idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still pending: {len(d.pending)}")
