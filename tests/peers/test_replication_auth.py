"""Replication between secured nodes: the peer credential is sent, and required (issue 7)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from registry import FakeClock, Settings, create_app
from registry.appkeys import LIFECYCLE
from registry.codec.wire import basic_authorization
from registry.model import InstanceStatus
from tests.helpers import eventually, instance_doc
from tests.peers.test_replication import (
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
    return Settings(
        client_credentials=("svc:client-pw",),
        admin_credentials=("ops:admin-pw",),
        peer_credential=peer_credential,
        peers=peers,
    )


@pytest.fixture
async def peer(aiohttp_server: AiohttpServer, clock: FakeClock) -> TestServer:
    return await aiohttp_server(create_app(secured("cluster:peer-pw"), clock=clock))


async def start_node(
    aiohttp_client: AiohttpClient, peer: TestServer, clock: FakeClock, credential: str
) -> TestClient:
    settings = secured(credential, peers=(str(peer.make_url("/eureka/")),))
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
    assert {"i-1": InstanceStatus.OUT_OF_SERVICE} == dict(registry(peer).overrides())
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
    assert "peer_credential" in stats.last_error
    assert not has(peer, "i-1")
