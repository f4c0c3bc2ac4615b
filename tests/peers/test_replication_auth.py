"""Replication between secured nodes: the peer credential is sent, and required (issue 7)."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from registry import FakeClock, Settings, create_app
from registry.appkeys import LIFECYCLE
from registry.codec.wire import basic_authorization
from registry.core.model import InstanceStatus
from tests.helpers import eventually, instance_doc
from tests.peers.apps import (
    AiohttpClient,
    AiohttpServer,
    dispatcher,
    has,
    registry,
    replicated,
)

CLIENT = {"Authorization": basic_authorization("svc:client-pw")}
ADMIN = {"Authorization": basic_authorization("ops:admin-pw")}


def secured(peer_credential: str, peers: tuple[str, ...] = ()) -> Settings:
    return Settings.of(
        store__enabled=False,
        credentials__clients=("svc:client-pw",),
        credentials__admins=("ops:admin-pw",),
        credentials__peer=peer_credential,
        peers__urls=peers,
    )


@pytest.fixture
async def peer(aiohttp_server: AiohttpServer, clock: FakeClock) -> TestServer:
    return await aiohttp_server(create_app(secured("cluster:peer-pw"), clock=clock))


async def start_node(
    aiohttp_client: AiohttpClient,
    peer: TestServer,
    clock: FakeClock,
    credential: str,
    data_dir: str = "data",
) -> TestClient:
    settings = secured(credential, peers=(str(peer.make_url("/eureka/")),)).replace(
        store__data_dir=data_dir
    )
    return await aiohttp_client(create_app(settings, clock=clock))


async def register(node: TestClient) -> None:
    body = orjson.dumps({"instance": instance_doc()})
    headers = {**CLIENT, "Content-Type": "application/json"}
    assert 204 == (await node.post("/eureka/apps/ORDERS", data=body, headers=headers)).status


async def test_a_node_with_the_peer_credential_syncs_and_replicates(aiohttp_client, peer, clock):
    node = await start_node(aiohttp_client, peer, clock, "cluster:peer-pw")
    await eventually(lambda: node.app[LIFECYCLE].serves_reads)  # type: ignore[index]
    assert 0 == dispatcher(node).stats.failed
    await register(node)
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"
    assert 200 == (await node.put(path, headers=ADMIN)).status
    await replicated(node, clock)
    assert {"i-1": InstanceStatus.OUT_OF_SERVICE} == dict(registry(peer).overrides)
    assert 0 == dispatcher(node).stats.failed


async def test_a_node_with_a_wrong_peer_credential_is_refused(aiohttp_client, peer, clock):
    node = await start_node(aiohttp_client, peer, clock, "cluster:wrong")
    await register(node)
    stats = dispatcher(node).stats
    for _ in range(200):  # each batch needs real round trips
        await clock.advance(0.1)
        if stats.failed:
            break
        await asyncio.sleep(0.01)
    assert stats.failed >= 1
    assert "credentials.peer" in stats.last_error
    assert not has(peer, "i-1")


async def test_an_overrides_note_reaches_the_peer_which_expires_it_on_its_own(
    aiohttp_client, peer, clock
):
    """A's override, with its reason, author and expiry, is listed the same on B; with A
    gone, B still removes it when it expires."""
    node = await start_node(aiohttp_client, peer, clock, "cluster:peer-pw", data_dir="a")
    await eventually(lambda: node.app[LIFECYCLE].serves_reads)  # type: ignore[index]
    await register(node)
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=incident&expires=10m"
    assert 200 == (await node.put(path, headers=ADMIN)).status
    await replicated(node, clock)

    async def listed(server: TestClient | TestServer) -> list[dict[str, object]]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.make_url("/eureka/overrides"), headers=ADMIN) as response,
        ):
            return (await response.json())["overrides"]  # type: ignore[no-any-return]

    [on_a] = await listed(node)
    assert ("incident", "ops") == (on_a["reason"], on_a["setBy"])
    assert [on_a] == await listed(peer)

    await node.close()  # A is gone
    await clock.advance(9 * 60)
    assert {"i-1": InstanceStatus.OUT_OF_SERVICE} == dict(registry(peer).overrides)
    await clock.advance(60 + 1)
    assert {} == dict(registry(peer).overrides)


async def test_a_node_syncing_at_start_takes_its_peers_override_notes(aiohttp_client, peer, clock):
    """B holds an override with its note; A, starting with B as its peer, copies B's
    registry (the override comes with the instance) and takes B's note with it."""
    body = orjson.dumps({"instance": instance_doc()})
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=incident&expires=1h"
    async with aiohttp.ClientSession() as session:
        headers = {**CLIENT, "Content-Type": "application/json"}
        async with session.post(peer.make_url("/eureka/apps/ORDERS"), data=body, headers=headers):
            pass
        async with session.put(peer.make_url(path), headers=ADMIN) as response:
            assert 200 == response.status
        async with session.get(peer.make_url("/eureka/overrides"), headers=ADMIN) as response:
            [on_b] = (await response.json())["overrides"]
    node = await start_node(aiohttp_client, peer, clock, "cluster:peer-pw", data_dir="a")
    await eventually(lambda: node.app[LIFECYCLE].serves_reads)  # type: ignore[index]
    [on_a] = (await (await node.get("/eureka/overrides", headers=ADMIN)).json())["overrides"]
    assert ("incident", "ops") == (on_a["reason"], on_a["setBy"])
    assert on_b == on_a
