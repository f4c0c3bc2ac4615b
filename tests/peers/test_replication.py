"""Replication between two real apps on loopback, on one fake clock: what is sent, when, and
what the sender does with the peer's answers (contract 11.2-11.4)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from peers.anti_entropy import SETTLE
from registry import FakeClock, Settings, create_app
from registry.appkeys import LIFECYCLE
from registry.core.model import InstanceStatus
from tests.helpers import eventually, free_port, instance_doc, register
from tests.peers.apps import (
    AiohttpClient,
    AiohttpServer,
    dispatcher,
    has,
    register_on,
    registry,
    replicated,
)

REPLICATION = {"x-netflix-discovery-replication": "true"}


@pytest.fixture
async def peer(aiohttp_server: AiohttpServer, clock: FakeClock) -> TestServer:
    """Node B: a real app with no peers of its own."""
    return await aiohttp_server(create_app(Settings.of(store__enabled=False), clock=clock))


@pytest.fixture
async def node(aiohttp_client: AiohttpClient, peer: TestServer, clock: FakeClock) -> TestClient:
    """Node A, which replicates to B."""
    settings = Settings.of(store__enabled=False, peers__urls=(str(peer.make_url("/eureka/")),))
    client = await aiohttp_client(create_app(settings, clock=clock))
    await eventually(lambda: client.app[LIFECYCLE].serves_reads)  # type: ignore[index]
    return client


class TestPropagation:
    async def test_client_changes_reach_the_peer(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """Register, override, delete override and cancel on A are applied on B."""
        await register(node)
        await replicated(node, clock)
        assert has(peer, "i-1")
        await node.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        await replicated(node, clock)
        assert {"i-1": InstanceStatus.OUT_OF_SERVICE} == dict(registry(peer).overrides)
        await node.delete("/eureka/apps/ORDERS/i-1/status?value=UP")
        await replicated(node, clock)
        assert {} == dict(registry(peer).overrides)
        assert (
            InstanceStatus.UP
            is registry(peer).get("ORDERS", "i-1", now_ms=clock.wall_ms()).instance.status
        )
        await node.delete("/eureka/apps/ORDERS/i-1")
        await replicated(node, clock)
        assert not has(peer, "i-1")

    async def test_changes_do_not_wait_for_the_heartbeat_delay(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """A registration leaves after the short change delay, not the 0.5 s batch delay."""
        await register(node)
        await clock.advance(0.05)
        await eventually(lambda: has(peer, "i-1"))

    async def test_a_thousand_heartbeats_become_one_item(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """Heartbeats of one instance within one batch window are sent as one item."""
        await register(node)
        await replicated(node, clock)
        sent = dispatcher(node).stats.sent
        for _ in range(1000):
            assert 200 == (await node.put("/eureka/apps/ORDERS/i-1")).status
        assert 1 == len(dispatcher(node).pending)
        await replicated(node, clock)
        assert (1, 999) == (dispatcher(node).stats.sent - sent, dispatcher(node).pending.coalesced)

    async def test_replicated_calls_are_not_sent_on(self, node: TestClient, clock: FakeClock):
        """One hop: what A receives as replication, A does not forward."""
        body = orjson.dumps({"instance": instance_doc()})
        headers = {"Content-Type": "application/json", **REPLICATION}
        assert 204 == (await node.post("/eureka/apps/ORDERS", data=body, headers=headers)).status
        assert 200 == (await node.put("/eureka/apps/ORDERS/i-1", headers=REPLICATION)).status
        status = "/eureka/apps/ORDERS/i-1/status?value=DOWN"
        assert 200 == (await node.put(status, headers=REPLICATION)).status
        assert 200 == (await node.delete("/eureka/apps/ORDERS/i-1", headers=REPLICATION)).status
        assert 0 == len(dispatcher(node).pending)


class TestConflicts:
    async def test_a_heartbeat_the_peer_does_not_know_is_followed_by_the_registration(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """B answers 404 to the heartbeat; A sends B the full registration."""
        body = orjson.dumps({"instance": instance_doc()})
        headers = {"Content-Type": "application/json", **REPLICATION}
        await node.post("/eureka/apps/ORDERS", data=body, headers=headers)  # not replicated
        await node.put("/eureka/apps/ORDERS/i-1")
        await replicated(node, clock)
        await replicated(node, clock)
        assert (1, True) == (dispatcher(node).stats.reregistered, has(peer, "i-1"))

    async def test_the_peers_newer_copy_is_adopted(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """B answers 409 with its newer copy (and its override); A takes both, the lease
        renewed when B last saw it renew, not when the answer came."""
        headers = {"Content-Type": "application/json", **REPLICATION}
        ours = instance_doc(lastDirtyTimestamp="1735689000000")
        theirs = instance_doc(
            lastDirtyTimestamp="1735689009000",
            status="OUT_OF_SERVICE",
            overriddenStatus="OUT_OF_SERVICE",
            metadata={"version": "2"},
        )
        await node.post(
            "/eureka/apps/ORDERS", data=orjson.dumps({"instance": ours}), headers=headers
        )
        async with aiohttp.ClientSession() as session:
            await session.post(
                peer.make_url("/eureka/apps/ORDERS"),
                data=orjson.dumps({"instance": theirs}),
                headers=headers,
            )
        await node.put("/eureka/apps/ORDERS/i-1")
        await replicated(node, clock)
        lease = registry(node).get("ORDERS", "i-1", now_ms=clock.wall_ms())
        assert (1735689009000, InstanceStatus.OUT_OF_SERVICE, {"version": "2"}) == (
            lease.instance.last_dirty_ms,
            lease.instance.overridden_status,
            dict(lease.instance.metadata),
        )
        assert 1 == dispatcher(node).stats.adopted

    async def test_a_copy_taken_for_a_refused_cancel_keeps_its_renewal_there(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """A's client cancels an older copy than B holds: B refuses with its copy, which A
        takes renewed when B last saw it renew. Dated at its arrival instead, a copy that
        reached A late (across a partition) would outlive a cancel made after its last renewal
        on any node (the convergence model found it: a cancelled instance back where it was
        cancelled)."""
        headers = {"Content-Type": "application/json", **REPLICATION}
        ours = instance_doc(lastDirtyTimestamp="1735689000000")
        theirs = instance_doc(lastDirtyTimestamp="1735689009000")
        await node.post(
            "/eureka/apps/ORDERS", data=orjson.dumps({"instance": ours}), headers=headers
        )
        renewed_there = clock.wall_ms()
        async with aiohttp.ClientSession() as session:
            await session.post(
                peer.make_url("/eureka/apps/ORDERS"),
                data=orjson.dumps({"instance": theirs}),
                headers=headers,
            )
        await clock.advance(20)
        assert 200 == (await node.delete("/eureka/apps/ORDERS/i-1")).status
        await replicated(node, clock)
        lease = registry(node).get("ORDERS", "i-1", now_ms=clock.wall_ms())
        assert (1735689009000, renewed_there) == (
            lease.instance.last_dirty_ms,
            lease.last_renewal_ms,
        )


def absent_peer(port: int) -> Settings:
    """A node's settings whose only peer, on `port`, does not listen yet."""
    return Settings.of(
        store__enabled=False,
        peers__urls=(f"http://127.0.0.1:{port}/eureka/",),
        peers__sync_budget=1,
        peers__sync_empty_window=1,
    )


class TestUnreachablePeer:
    @pytest.fixture
    async def lonely(self, aiohttp_client: AiohttpClient, clock: FakeClock) -> TestClient:
        """A node whose only peer does not listen."""
        settings = Settings.of(
            store__enabled=False,
            peers__urls=(f"http://127.0.0.1:{free_port()}/eureka/",),
            peers__max_pending=5,
            peers__sync_budget=1,
            peers__sync_empty_window=60,
        )
        return await aiohttp_client(create_app(settings, clock=clock))

    async def test_reads_wait_for_a_peer_then_open(self, lonely: TestClient, clock: FakeClock):
        """Fetches are 403 with the reason until the empty-sync window ends; writes never wait."""
        await register(lonely)
        await clock.advance(2)
        response = await lonely.get("/eureka/apps/", headers={"Accept": "application/json"})
        body: dict[str, Any] = await response.json()
        assert (403, "not_synced") == (response.status, body["error"])
        assert "no peer could be copied" in body["detail"]
        await clock.advance(60)
        assert 200 == (await lonely.get("/eureka/apps/")).status

    async def test_the_queue_stays_bounded_and_counts_drops(
        self, lonely: TestClient, clock: FakeClock
    ):
        """While the peer is down, changes are retried, heartbeats dropped first, all counted."""
        d = dispatcher(lonely)
        for n in range(8):
            await register(lonely, iid=f"i-{n}")
        assert (0, 3) == (d.pending.dropped_heartbeats, d.pending.dropped_changes)  # 8 in 5
        for n in range(8):
            await lonely.put(f"/eureka/apps/ORDERS/i-{n}")
        # The queue is full of registrations: every heartbeat goes, and no change for one.
        assert (8, 3) == (d.pending.dropped_heartbeats, d.pending.dropped_changes)
        await clock.advance(1)
        await eventually(lambda: d.stats.reachable is False)
        assert 5 >= len(d.pending)
        assert 0 < d.stats.retried

    async def test_a_peer_that_comes_back_is_noticed_in_seconds_and_pulled_at_once(
        self, aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """B is down for a minute while A has changes for it: A keeps trying at least every
        peer_probe_interval (2 s), not at the 30 s congestion cap, and on B's return pulls
        what only B holds within SETTLE (the round the return starts looks, the next
        repairs), not at the next anti-entropy round (30 s)."""
        port = free_port()
        a = await aiohttp_client(create_app(absent_peer(port), clock=clock))
        await register(a, iid="on-a")
        for _ in range(60):  # a minute of failed tries
            await clock.advance(1)
            await asyncio.sleep(0.01)
        d = dispatcher(a)
        assert (False, 1) == (d.stats.reachable, len(d.pending))
        b = await aiohttp_server(
            create_app(Settings.of(store__enabled=False), clock=clock), port=port
        )
        await register_on(b)
        for _ in range(35):  # at most peer_probe_interval + SETTLE and a half second
            await clock.advance(0.1)
            await asyncio.sleep(0.01)
            if has(b, "on-a") and any(
                lease.instance.instance_id == "only-on-b" for lease in registry(a).leases()
            ):
                break
        else:
            raise AssertionError(f"not converged 3.5 s after the return: {d.stats}")

    async def test_a_call_from_a_peer_ends_the_pause_before_the_next_try(
        self, aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """A restarted node calls its peers as it starts (anti-entropy): a node holding changes
        for a peer it could not reach tries again then, not when its pause (here at least
        15 s: peer_probe_interval 30 s) is over."""
        port = free_port()
        settings = absent_peer(port).replace(peers__probe_interval=30)
        a = await aiohttp_client(create_app(settings, clock=clock))
        await register(a, iid="on-a")
        d = dispatcher(a)
        for _ in range(30):  # failed tries: the pauses (from 0.1 s, doubling) reach 12.8 s
            await clock.advance(1)
            await asyncio.sleep(0.01)
        retried = d.stats.retried
        for _ in range(30):  # until a try has just failed: a pause of 15-30 s begins
            if d.stats.retried != retried:
                break
            await clock.advance(1)
            await asyncio.sleep(0.01)
        assert (False, 1) == (d.stats.reachable, len(d.pending))
        b = await aiohttp_server(
            create_app(Settings.of(store__enabled=False), clock=clock), port=port
        )
        response = await a.get("/eureka/peerreplication/digest", headers=REPLICATION)
        assert 200 == response.status
        for _ in range(3):  # 0.3 s of the clock
            await clock.advance(0.1)
            await asyncio.sleep(0.02)
        await eventually(lambda: d.stats.reachable, timeout=2)
        assert has(b, "on-a")

    async def test_a_node_with_nothing_to_send_pulls_within_seconds_of_the_return(
        self, aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """A node cut off holds no change for its peer, so no batch notices the return; its
        anti-entropy round that could not reach the peer is tried again every
        peer_probe_interval (2 s) rather than at the next interval (30 s); the round that
        reaches it looks, the one SETTLE later pulls."""
        port = free_port()
        a = await aiohttp_client(create_app(absent_peer(port), clock=clock))
        for _ in range(40):  # past its first anti-entropy round, which found no one
            await clock.advance(1)
            await asyncio.sleep(0.01)
        assert 0 == len(dispatcher(a).pending)
        b = await aiohttp_server(
            create_app(Settings.of(store__enabled=False), clock=clock), port=port
        )
        await register_on(b)
        for _ in range(35):  # at most peer_probe_interval + SETTLE and a half second
            await clock.advance(0.1)
            await asyncio.sleep(0.01)
            if any(lease.instance.instance_id == "only-on-b" for lease in registry(a).leases()):
                break
        else:
            raise AssertionError("not pulled 3.5 s after the return")


class TestAntiEntropy:
    async def test_a_syncing_node_opens_reads_only_when_level_with_its_peer(
        self, aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """A starts while its only peer is down, so its reads stay closed; a registration
        waits in its queue for the peer. The peer returns holding an instance of its own: the
        batch that finds it back starts an anti-entropy round, which only looks. Reads open
        once a round (or the start-up sync) has copied what differed, never before."""
        port = free_port()
        settings = absent_peer(port).replace(peers__sync_budget=60, peers__sync_empty_window=60)
        a = await aiohttp_client(create_app(settings, clock=clock))
        await register(a, iid="on-a")
        for _ in range(20):  # the start-up sync's pauses grow to 5 s meanwhile
            await clock.advance(1)
            await asyncio.sleep(0.01)
        assert not a.app[LIFECYCLE].serves_reads  # type: ignore[index]
        b = await aiohttp_server(
            create_app(Settings.of(store__enabled=False), clock=clock), port=port
        )
        await register_on(b)
        for _ in range(100):
            await clock.advance(0.1)
            await asyncio.sleep(0.01)
            if a.app[LIFECYCLE].serves_reads:  # type: ignore[index]
                break
        else:
            raise AssertionError("reads still closed 10 s after the peer returned")
        assert has(a, "only-on-b")
        assert dispatcher(a).stats.reachable

    async def test_what_replication_missed_is_pulled(
        self, node: TestClient, peer: TestServer, clock: FakeClock
    ):
        """An instance only B holds (no batch ever carried it) reaches A within one interval:
        the round that sees the difference is followed, SETTLE later, by one that repairs what
        still differs (what was on its way by replication would not)."""
        await register_on(peer)
        async with aiohttp.ClientSession() as session:
            digests = await (
                await session.get(peer.make_url("/eureka/peerreplication/digest"))
            ).json()
        assert ["ORDERS"] == list(digests["applications"])
        assert not any(
            lease.instance.instance_id == "only-on-b" for lease in registry(node).leases()
        )
        await clock.advance(30)
        for _ in range(5):  # each step a round's real round trips, then the clock
            await asyncio.sleep(0.05)
            if has(node, "only-on-b"):
                break
            await clock.advance(SETTLE)
        else:
            raise AssertionError("not pulled in the rounds after the interval")

    async def test_a_peers_fetch_limit_does_not_hold_anti_entropy_back(
        self, aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """B throttles its clients hard; A's anti-entropy still pulls every application B
        holds alone in one round (peers are never throttled), the one after it saw them."""
        b = await aiohttp_server(
            create_app(
                Settings.of(
                    store__enabled=False, limits__fetch_rate_limit=0.01, limits__fetch_burst=1
                ),
                clock=clock,
            )
        )
        settings = Settings.of(store__enabled=False, peers__urls=(str(b.make_url("/eureka/")),))
        a = await aiohttp_client(create_app(settings, clock=clock))
        await eventually(lambda: a.app[LIFECYCLE].serves_reads)  # type: ignore[index]
        for n in range(20):
            await register_on(b, f"APP{n}", f"i-{n}")
        await clock.advance(30)
        for _ in range(5):  # each step a round's real round trips, then the clock
            await asyncio.sleep(0.05)
            if len(registry(a)) == 20:
                break
            await clock.advance(SETTLE)
        else:
            raise AssertionError("not every application pulled")
