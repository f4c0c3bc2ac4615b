"""Peer replication between real `python -m registry serve` processes on loopback (contract 11).

Each node is started with every node's URL in `--peers` (it skips its own) and short timings
through `REGISTRY_*` variables. Propagation is awaited by polling a condition until a
deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest

from tests.helpers import eventually, free_ports, instance_doc
from tests.nodes import Node, base_url

pytestmark = pytest.mark.slow


def peer_stats(status: dict[str, Any], url: str) -> dict[str, Any]:
    (stats,) = (p for p in status["peers"] if p["url"] == url)
    return stats  # type: ignore[no-any-return]


class TestReplication:
    async def test_every_change_on_one_node_reaches_the_other_two(self, nodes):
        """Register, heartbeat, override set and delete, and cancel on A all reach B and C."""
        a, b, c = await nodes.cluster(3)
        others = (b, c)

        await a.register("ORDERS", "i-1")
        copies = [await eventually(lambda n=n: n.instance("ORDERS", "i-1")) for n in others]
        assert ["UP", "UP"] == [copy["status"] for copy in copies]

        renewed = [copy["leaseInfo"]["lastRenewalTimestamp"] for copy in copies]
        status, _ = await a.call(
            "PUT", "apps/ORDERS/i-1?status=UP&lastDirtyTimestamp=1735689000000"
        )
        assert 200 == status
        for node, before in zip(others, renewed, strict=True):
            await eventually(
                lambda n=node: n.instance("ORDERS", "i-1"),
                lambda doc, t=before: doc and doc["leaseInfo"]["lastRenewalTimestamp"] > t,
            )

        status, _ = await a.call("PUT", "apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert 200 == status
        for node in others:
            copy = await eventually(
                lambda n=node: n.instance("ORDERS", "i-1"),
                lambda doc: doc and doc["overriddenStatus"] == "OUT_OF_SERVICE",
            )
            assert "OUT_OF_SERVICE" == copy["status"]

        status, _ = await a.call("DELETE", "apps/ORDERS/i-1/status?value=UP")
        assert 200 == status
        for node in others:
            copy = await eventually(
                lambda n=node: n.instance("ORDERS", "i-1"),
                lambda doc: doc and doc["overriddenStatus"] == "UNKNOWN",
            )
            assert "UP" == copy["status"]

        status, _ = await a.call("DELETE", "apps/ORDERS/i-1")
        assert 200 == status
        for node in others:
            await eventually(lambda n=node: n.instance("ORDERS", "i-1"), lambda doc: doc is None)


class TestRestart:
    async def test_a_restarted_node_copies_the_registry_and_converges(self, nodes):
        """A node killed while changes happen copies a peer's registry at start and converges."""
        cluster = await nodes.cluster(3)
        a, b, c = cluster
        apps = ("ORDERS", "PAYMENTS")
        for k in range(21):
            await cluster[k % 3].register(apps[k % 2], f"i-{k}")
        expected = frozenset(f"i-{k}" for k in range(21))
        for node in cluster:
            await eventually(node.registry, lambda r: r[1] == expected)

        await c.kill()
        for k in range(21, 26):
            await a.register(apps[k % 2], f"i-{k}")
        for k in (2, 5, 8):  # registered on C
            status, _ = await a.call("DELETE", f"apps/{apps[k % 2]}/i-{k}")
            assert 200 == status
        status, _ = await a.call("PUT", "apps/ORDERS/i-0/status?value=OUT_OF_SERVICE")
        assert 200 == status
        expected = frozenset(f"i-{k}" for k in range(26)) - {"i-2", "i-5", "i-8"}
        await eventually(b.registry, lambda r: r == ("OUT_OF_SERVICE_1_UP_22_", expected))

        # A long anti-entropy interval keeps the start-up sync's reason in place to be read.
        c.settings["peers__anti_entropy_interval"] = 60
        await c.start()
        await eventually(c.serving_reads)
        assert "copied" in (await c.status())["generalStats"]["reads-reason"]
        for node in cluster:
            await eventually(node.registry, lambda r: r == ("OUT_OF_SERVICE_1_UP_22_", expected))
        digests = [await node.digests() for node in cluster]
        assert digests[0] == digests[1] == digests[2]


class TestUnreachablePeer:
    async def test_clients_are_served_while_the_only_peer_is_down(self, nodes):
        """With its peer down a node answers every write, bounds the peer's queue, and drops."""
        port_a, port_b = free_ports(2)
        a = await nodes.start(
            port_a,
            [port_a, port_b],
            peers__max_pending=50,
            peers__sync_budget=0.5,
            peers__sync_empty_window=1,
        )
        depths: list[int] = []
        done = asyncio.Event()

        async def sample_queue() -> None:
            while not done.is_set():
                depths.append(peer_stats(await a.status(), base_url(port_b))["queueDepth"])
                await asyncio.sleep(0.1)

        failures: list[tuple[str, int]] = []
        ids = iter(range(300))

        async def client() -> None:
            for k in ids:
                status, _ = await a.call(
                    "POST", "apps/ORDERS", body={"instance": instance_doc("ORDERS", f"i-{k}")}
                )
                if status != 204:
                    failures.append((f"register i-{k}", status))
                status, _ = await a.call("PUT", f"apps/ORDERS/i-{k}?status=UP")
                if status != 200:
                    failures.append((f"heartbeat i-{k}", status))

        sampler = asyncio.create_task(sample_queue())
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(16))), 30)
        done.set()
        await sampler

        assert [] == failures
        stats = await eventually(
            a.status, lambda s: peer_stats(s, base_url(port_b))["reachable"] is False
        )
        peer = peer_stats(stats, base_url(port_b))
        depths.append(peer["queueDepth"])
        assert 50 >= max(depths)
        assert 0 < peer["dropped"]
        assert base_url(port_b) in stats["applicationStats"]["unavailable-replicas"]
        # The empty-sync window is over by now, or soon: reads open without any peer.
        await eventually(a.serving_reads)
        assert ("UP_300_", frozenset(f"i-{k}" for k in range(300))) == await a.registry()

    async def test_reads_are_refused_until_a_peer_is_copied(self, nodes):
        """While no peer can be copied, reads answer 403 not_synced and writes are served."""
        port_a, port_b = free_ports(2)
        a = await nodes.start(
            port_a, [port_a, port_b], peers__sync_budget=0.5, peers__sync_empty_window=60
        )
        await a.register("ORDERS", "i-1")
        for path in ("apps", "apps/delta", "apps/ORDERS"):
            status, answer = await a.call("GET", path)
            assert (403, "not_synced") == (status, answer["error"])
        general = (await a.status())["generalStats"]
        assert "false" == general["serving-reads"]
        assert "i-1" == (await a.instance("ORDERS", "i-1"))["instanceId"]


class TestReload:
    async def test_sighup_applies_a_new_peer_list(self, nodes, tmp_path):
        """After its config file gains a peer and it gets SIGHUP, a node replicates to it."""
        port_a, port_b = free_ports(2)
        config = tmp_path / "a.toml"
        await asyncio.to_thread(config.write_text, f'[peers]\nurls = ["{base_url(port_a)}"]\n')
        # Anti-entropy is kept out of the way: only replication may carry instances to B.
        a = await nodes.start(port_a, config=config, peers__anti_entropy_interval=60)
        b = await nodes.start(port_b, [port_a, port_b], peers__anti_entropy_interval=60)
        await eventually(b.serving_reads)
        assert [] == (await a.status())["peers"]

        await a.register("ORDERS", "before-reload")
        text = f'[peers]\nurls = ["{base_url(port_a)}", "{base_url(port_b)}"]\n'
        await asyncio.to_thread(config.write_text, text)
        a.signal(signal.SIGHUP)
        status = await eventually(a.status, lambda s: s["peers"])
        assert [b.url] == [peer["url"] for peer in status["peers"]]

        await a.register("ORDERS", "after-reload")
        await eventually(lambda: b.instance("ORDERS", "after-reload"))
        assert None is await b.instance("ORDERS", "before-reload")


class TestOverrides:
    async def test_an_overrides_note_and_expiry_hold_on_a_peer_after_its_origin_dies(self, nodes):
        """Reason, author and expiry set on A are listed the same on B; with A killed, B
        removes the override at its expiry, and not before. Real processes keep real time, so
        the expiry is a few seconds away and B is watched until it passes."""
        a, b = await nodes.cluster(2)
        await a.register("ORDERS", "i-1")
        await eventually(lambda: b.instance("ORDERS", "i-1"))
        put = "apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=disk+swap&expires=4s"
        assert 200 == (await a.call("PUT", put))[0]

        async def listed(node: Node) -> list[dict[str, Any]]:
            status, answer = await node.call("GET", "overrides")
            assert 200 == status, answer
            return answer["overrides"]  # type: ignore[no-any-return]

        on_b = await eventually(lambda: listed(b))
        assert await listed(a) == on_b
        assert ("disk swap", "OUT_OF_SERVICE") == (on_b[0]["reason"], on_b[0]["status"])
        await a.kill()
        expires_at = on_b[0]["expiresAt"]
        seen: list[tuple[float, bool]] = []  # (wall ms, still listed)

        async def watched() -> bool:
            still = bool(await listed(b))
            seen.append((time.time() * 1000, still))
            return still

        await eventually(watched, lambda still: not still, timeout=15)
        assert all(still for at, still in seen if at < expires_at)
        assert seen[-1][0] < expires_at + 2_500  # the expiry sweep runs once a second
        assert "UNKNOWN" == (await b.instance("ORDERS", "i-1"))["status"]


class TestAntiEntropy:
    async def test_an_instance_only_one_node_holds_reaches_the_other(self, nodes):
        """An instance B took as a replication (so never forwarded) reaches A by anti-entropy."""
        a, b = await nodes.cluster(2, peers__anti_entropy_interval=1)
        await b.register("ORDERS", "i-1", replication=True)

        copy = await eventually(lambda: a.instance("ORDERS", "i-1"))
        assert "UP" == copy["status"]
        assert 0 == peer_stats(await b.status(), a.url)["sent"]
