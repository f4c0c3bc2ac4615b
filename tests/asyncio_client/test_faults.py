"""`DiscoveryClient` when things go wrong, against real server processes: a server killed, reads
refused at the start, the task around the client cancelled."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from registry.client import DiscoveryClient
from tests.asyncio_client.servers import post, session, start_node, status_of
from tests.helpers import eventually, free_ports, instance_doc

__all__ = ["session", "start_node"]  # fixtures

pytestmark = pytest.mark.slow

FAST = {"renewal_interval": 1, "lease_duration": 10}


async def test_a_killed_server_is_left_for_the_next(start_node, session):
    """Two peers; the one the client uses is killed: it goes over to the other, keeps
    heartbeating there and sees what is registered there."""
    a_port, b_port = free_ports(2)
    urls = {port: f"http://127.0.0.1:{port}/eureka/" for port in (a_port, b_port)}
    # Started together: each copies the other before it serves.
    a = await start_node(a_port, ready=None, peers__urls=urls[b_port])
    b = await start_node(b_port, ready=None, peers__urls=urls[a_port])
    await a.wait_ready()
    await b.wait_ready()
    servers = f"{a.eureka},{b.eureka}"
    async with DiscoveryClient(servers, app="orders", port=8080, **FAST) as client:
        own = f"apps/ORDERS/{client.instance.instance_id}"
        await eventually(lambda: status_of(session, b.eureka + own), lambda s: s == 200)
        await eventually(lambda: client.sync_mode, lambda mode: mode == "watch")
        await a.kill()
        beats = client.stats.heartbeats

        await eventually(lambda: client.stats.failovers, lambda n: n >= 1, what="a failover")
        body = {"instance": instance_doc("BILLING", "b-1")}
        assert 204 == await post(session, b.eureka + "apps/BILLING", body)
        await client.wait_for("billing", timeout=10)
        await eventually(lambda: client.stats.heartbeats, lambda n: n >= beats + 2)
        assert "watch" == client.sync_mode
    assert 404 == await status_of(session, b.eureka + own)  # the cancel went to b


async def test_heartbeats_go_on_while_the_first_fetch_fails(start_node, session):
    """A node copying the registry from a peer that does not answer refuses reads (403) for a
    while but takes registrations and heartbeats: the client beats while its fetches fail."""
    [absent] = free_ports(1)
    node = await start_node(
        ready="/healthz",  # it listens, but is not ready: it serves no reads yet
        peers__urls=f"http://127.0.0.1:{absent}/eureka/",
        peers__sync_budget="60",
        peers__sync_empty_window="60",
    )
    assert 403 == await status_of(session, node.eureka + "apps/")
    async with DiscoveryClient(
        node.eureka, app="orders", port=8080, start_timeout=1, **FAST
    ) as client:
        assert (0, "none") == (client.stats.full_fetches, client.sync_mode)
        await eventually(lambda: client.stats.heartbeats, lambda n: n >= 3, what="heartbeats")
        assert (0, 0) == (client.stats.full_fetches, client.stats.heartbeat_failures)
        assert 1 == client.stats.registrations


async def test_cancelling_the_task_around_the_client_cancels_the_instance(start_node, session):
    """A service's task cancelled (its shutdown) takes its instance out of the registry."""
    node = await start_node()
    entered = asyncio.Event()
    ids = []

    async def service() -> None:
        async with DiscoveryClient(node.eureka, app="orders", port=8080, **FAST) as client:
            ids.append(client.instance.instance_id)
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(service())
    await asyncio.wait_for(entered.wait(), 10)
    own = f"{node.eureka}apps/ORDERS/{ids[0]}"
    assert 200 == await status_of(session, own)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert 404 == await status_of(session, own)


async def test_the_first_server_is_taken_back_once_it_returns(start_node, session):
    """Left for the second when it stopped, the first server is used again after
    `return_after` once it serves again."""
    a_port = free_ports(1)[0]
    a = await start_node(a_port)
    b = await start_node()
    servers = f"{a.eureka},{b.eureka}"
    async with DiscoveryClient(servers, app="orders", port=8080, return_after=2, **FAST) as client:
        assert a.eureka == client.server
        await a.stop()
        await eventually(lambda: client.server, lambda url: url == b.eureka, what="failover")
        own = f"apps/ORDERS/{client.instance.instance_id}"
        await eventually(lambda: status_of(session, b.eureka + own), lambda s: s == 200)

        await start_node(a_port)
        await eventually(lambda: client.server, lambda url: url == a.eureka, timeout=15)
        # The first server did not know the instance: a heartbeat's 404 registered it there.
        await eventually(lambda: status_of(session, a.eureka + own), lambda s: s == 200)
        # The copy follows the first server again (the two are not peers).
        body = {"instance": instance_doc("BILLING", "only-on-a")}
        assert 204 == await post(session, a.eureka + "apps/BILLING", body)
        await client.wait_for("billing", timeout=10)
        assert "watch" == client.sync_mode
