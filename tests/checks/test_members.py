"""Which nodes share out the checks: a peer counts once its answers say it runs checks; one
with checks off (or an earlier release, which says nothing) takes no share it would never
check."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from registry import FakeClock, Settings, create_app
from registry.appkeys import CLUSTER, LIFECYCLE
from tests.helpers import eventually, register
from tests.peers.apps import AiohttpClient, AiohttpServer, registry, replicated


async def node_with_peer(
    aiohttp_server: AiohttpServer,
    aiohttp_client: AiohttpClient,
    clock: FakeClock,
    *,
    peer_checks: bool,
) -> tuple[TestClient, str]:
    """A node replicating to one peer, after a batch has gone to it; the peer's epoch."""
    peer = await aiohttp_server(
        create_app(Settings.of(store__enabled=False, checks__enabled=peer_checks), clock=clock)
    )
    settings = Settings.of(store__enabled=False, peers__urls=(str(peer.make_url("/eureka/")),))
    node = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: node.app[LIFECYCLE].serves_reads)  # type: ignore[index]
    await register(node)
    await replicated(node, clock)
    return node, registry(peer).epoch


@pytest.mark.parametrize("peer_checks", [True, False])
async def test_a_peer_counts_when_it_runs_checks(
    aiohttp_server: AiohttpServer,
    aiohttp_client: AiohttpClient,
    clock: FakeClock,
    peer_checks: bool,
):
    node, peer_epoch = await node_with_peer(
        aiohttp_server, aiohttp_client, clock, peer_checks=peer_checks
    )
    members = node.app[CLUSTER].members()  # type: ignore[index]
    expected = [registry(node).epoch] + ([peer_epoch] if peer_checks else [])
    assert expected == members
