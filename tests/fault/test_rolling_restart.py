"""A rolling restart, as Kubernetes rolls a StatefulSet: three real nodes (on 127.0.0.2-4, one
port, finding each other by DNS, each with its own store) restarted one after another with
SIGTERM while twenty instances heartbeat through whichever nodes are up, as clients behind a
Service do; each comes back on its store, or, rescheduled, on an empty one. No instance is
evicted on any node during the roll, and afterwards self-preservation is not stuck: every node
evicts again, and an instance that stops renewing goes everywhere.

A node rescheduled on an empty store copies its peers' leases with their renewals as of the
copy: documents clients read carry renewals up to response_cache_max_age (30 s) old, which
would make every lease of 8 s look expired there.

Eureka's timeline a tenth as long, in real time as the clients keep it (see
test_self_preservation.py): renewals counted over 6 s, renewals every 2 s, leases of 8 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.dns_server import StubDns
from tests.helpers import JSON, eventually, free_port, instance_doc
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

NAME = "registry.test"
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
WINDOW = 6
LEASE = {"renewalIntervalInSecs": 2, "durationInSecs": 8}
INSTANCES = [f"i-{n}" for n in range(20)]
# What a node restarted on its store (or on its peers' copies) expects at its first counted
# window: each lease copied while renewing weighs its claim, WINDOW / its renewal interval,
# until it has renewed here for a window (registry/core/preservation.py); the threshold is
# int(0.85 x that), Eureka's renewal-percent-threshold.
RESTORED = len(INSTANCES) * WINDOW / LEASE["renewalIntervalInSecs"]  # 60 renewals a window
RESTORED_THRESHOLD = int(0.85 * RESTORED)  # 51


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[list[ServerProcess]]:
    dns = await StubDns().start()
    dns.set(NAME, HOSTS)
    port = free_port()
    nodes = [
        ServerProcess(
            tmp_path / f"{host}.log",
            port,
            host=host,
            settings={
                "store__data_dir": tmp_path / host,
                "peers__dns_name": NAME,
                "peers__dns_port": port,
                "peers__dns_nameservers": dns.server,
                "peers__dns_interval": 0.5,
                "peers__batch_delay": 0.05,
                "peers__anti_entropy_interval": 2,
                "self_preservation__renewal_window": WINDOW,
                "leases__eviction_interval": 1,
                "server__shutdown_delay": 0.5,
                "limits__fetch_rate_limit": 0,
                "logging__format": "json",
            },
        )
        for host in HOSTS
    ]
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        yield nodes
    finally:
        await asyncio.gather(*(node.kill() for node in nodes))
        dns.close()


class Clients:
    """The instances' heartbeats, each round spread over the nodes that are up (as a Service
    spreads them); a 404 is answered by registering again, as Eureka clients do."""

    def __init__(self, session: aiohttp.ClientSession, nodes: list[ServerProcess]) -> None:
        self.session = session
        self.up = list(nodes)
        self.silent: set[str] = set()
        self.reregistered = 0
        self.failures: list[str] = []

    async def register(self, node: ServerProcess, iid: str) -> None:
        doc = {"instance": instance_doc("ROLL", iid, leaseInfo=LEASE)}
        async with self.session.post(f"{node.eureka}apps/ROLL", json=doc) as response:
            if response.status != 204:
                self.failures.append(f"register {iid} on {node.host}: {response.status}")

    async def beat(self) -> None:
        while True:
            for n, iid in enumerate(INSTANCES):
                if iid in self.silent or not self.up:
                    continue
                node = self.up[n % len(self.up)]
                try:
                    async with self.session.put(f"{node.eureka}apps/ROLL/{iid}") as response:
                        status = response.status
                except aiohttp.ClientError as exc:
                    self.failures.append(f"heartbeat {iid} on {node.host}: {exc!r}")
                    continue
                if status == 404:
                    self.reregistered += 1
                    await self.register(node, iid)
                elif status != 200:
                    self.failures.append(f"heartbeat {iid} on {node.host}: {status}")
            await asyncio.sleep(LEASE["renewalIntervalInSecs"])  # the clients' own pace


async def status(session: aiohttp.ClientSession, node: ServerProcess) -> dict[str, Any]:
    async with session.get(f"{node.eureka}status", headers=JSON) as response:
        result: dict[str, Any] = await response.json()
        return result


async def held(session: aiohttp.ClientSession, node: ServerProcess) -> set[str]:
    async with session.get(f"{node.eureka}apps/ROLL", headers=JSON) as response:
        if response.status != 200:
            return set()
        return {i["instanceId"] for i in (await response.json())["application"]["instance"]}


async def evictions(session: aiohttp.ClientSession, node: ServerProcess) -> float:
    async with session.get(f"{node.base}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("registry_evictions_total "):
                return float(line.split()[1])
    raise AssertionError("no registry_evictions_total in /metrics")


@pytest.mark.parametrize("volume", ["kept", "new"])
async def test_no_instance_is_evicted_and_eviction_resumes(
    cluster: list[ServerProcess], volume: str
):
    """`kept`: each node comes back on its store, as a pod on its claim; `new`: on an empty
    data directory, as a pod rescheduled where its volume did not follow: it copies its peers."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        clients = Clients(session, cluster)
        for n, iid in enumerate(INSTANCES):
            await clients.register(cluster[n % 3], iid)
        beating = asyncio.ensure_future(clients.beat())
        try:
            for node in cluster:
                await eventually(lambda node=node: held(session, node), lambda ids: len(ids) == 20)
            for node in cluster:  # the roll: one at a time, each back and counting first
                clients.up.remove(node)  # its endpoint goes as the pod is told to stop
                assert 0 == await node.stop()
                if volume == "new":
                    await asyncio.to_thread(shutil.rmtree, node.settings["store__data_dir"])
                await node.start()
                clients.up.append(node)
                assert set(INSTANCES) == await held(session, node)
                first = await eventually(
                    lambda node=node: status(session, node),
                    lambda s: s["selfPreservation"]["renews-last-minute"] is not None,
                    timeout=3 * WINDOW,
                    what=f"{node.host} to count a window of renewals",
                )
                restored = first["selfPreservation"]
                assert (len(INSTANCES), RESTORED, RESTORED_THRESHOLD) == (
                    restored["expected-clients"],
                    restored["expected-renews-per-minute"],
                    restored["renews-threshold"],
                ), (node.host, restored)
            for node in cluster:
                assert set(INSTANCES) == await held(session, node), node.host
                assert 0 == await evictions(session, node), node.host
                sp = await eventually(
                    lambda node=node: status(session, node),
                    lambda s: s["selfPreservation"]["evicting"],
                    timeout=3 * WINDOW,
                    what=f"{node.host} to evict again",
                )
                # Each of the 20 leases weighs what it delivers, its claim of 3 a window at most
                # (a restored one its claim, until it has been back a window): T = int(0.85 x
                # 60) = 51, or a little less where replication coalesced a heartbeat.
                assert 45 <= sp["selfPreservation"]["renews-threshold"] <= 51, sp
            assert ([], 0) == (clients.failures, clients.reregistered)  # no client noticed
            # Not stuck: one instance stops renewing and is evicted everywhere.
            clients.silent.add("i-0")
            for node in cluster:
                await eventually(
                    lambda node=node: held(session, node),
                    lambda ids: "i-0" not in ids and len(ids) == 19,
                    timeout=LEASE["durationInSecs"] + 3 * WINDOW,
                    what=f"{node.host} to drop the silent instance",
                )
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
