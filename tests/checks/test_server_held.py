"""Instances the registry holds the lease of (`registry.lease = server`): an admin registers
something that cannot heartbeat (a database, a legacy service) with a check; silence never
evicts it, a restart keeps it, and only an admin removes or replaces it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from registry import FakeClock, Settings, create_app
from tests.credentials import basic
from tests.helpers import JSON, instance_doc
from tests.peers.apps import AiohttpClient

ADMIN, CLIENT = basic("ops", "admin-pw"), basic("svc", "client-pw")
SETTINGS = Settings.of(
    credentials__clients=("svc:client-pw",),
    credentials__admins=("ops:admin-pw",),
    checks__loopback=True,
    checks__min_interval=1,
)


def database(**metadata: str) -> dict[str, Any]:
    """A database's instance, with a TCP check on its port (nothing listens there: it is DOWN,
    and stays registered all the same)."""
    return instance_doc(
        "POSTGRES",
        "pg-1",
        ipAddr="127.0.0.1",
        port={"$": 9, "@enabled": "true"},
        leaseInfo={"renewalIntervalInSecs": 30, "durationInSecs": 90},
        metadata={"registry.lease": "server", "registry.check": "tcp", **metadata},
    )


async def post(node: TestClient, doc: dict[str, Any], headers: dict[str, str]) -> int:
    response = await node.post(
        f"/eureka/apps/{doc['app']}", json={"instance": doc}, headers=headers
    )
    return response.status


async def held(node: TestClient) -> bool:
    response = await node.get("/eureka/apps/POSTGRES/pg-1", headers=JSON | ADMIN)
    return response.status == 200


async def idle(clock: FakeClock, seconds: float) -> None:
    """Move the clock, in steps the eviction sweeps run at."""
    for _ in range(int(seconds)):
        await clock.advance(1)
        await asyncio.sleep(0)


@pytest.fixture
async def node(aiohttp_client: AiohttpClient, clock: FakeClock, tmp_path: Any) -> TestClient:
    return await aiohttp_client(create_app(SETTINGS, clock=clock))


async def test_only_an_admin_registers_one_and_only_with_a_check(node: TestClient):
    assert 403 == await post(node, database(), CLIENT)
    unchecked = database()
    del unchecked["metadata"]["registry.check"]
    assert 400 == await post(node, unchecked, ADMIN)
    assert 204 == await post(node, database(), ADMIN)


async def test_silence_never_evicts_it(node: TestClient, clock: FakeClock):
    assert 204 == await post(node, database(), ADMIN)
    silent = instance_doc("ORDERS", "o-1", leaseInfo={"durationInSecs": 30})
    assert 204 == await post(node, silent, CLIENT)
    await idle(clock, 600)
    assert await held(node)
    gone = await node.get("/eureka/apps/ORDERS/o-1", headers=JSON | ADMIN)
    assert 404 == gone.status  # a client's silent lease went long ago


async def test_only_an_admin_removes_or_replaces_it(node: TestClient):
    assert 204 == await post(node, database(), ADMIN)
    assert 403 == (await node.delete("/eureka/apps/POSTGRES/pg-1", headers=CLIENT)).status
    plain = database()
    del plain["metadata"]["registry.lease"]
    assert 403 == await post(node, plain, CLIENT)  # a client does not take it over
    assert await held(node)
    assert 200 == (await node.delete("/eureka/apps/POSTGRES/pg-1", headers=ADMIN)).status
    assert not await held(node)


async def test_a_restart_keeps_it_held(aiohttp_client: AiohttpClient, clock: FakeClock):
    first = await aiohttp_client(create_app(SETTINGS, clock=clock))
    assert 204 == await post(first, database(), ADMIN)
    await first.close()
    await clock.advance(600)  # down long past its lease
    second = await aiohttp_client(create_app(SETTINGS, clock=clock))
    await idle(clock, 300)
    assert await held(second)
