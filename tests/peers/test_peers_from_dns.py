"""Peers from DNS with real processes: nodes on 127.0.0.2-5 (one port, as pods have), a DNS
server on loopback naming them. Three find each other, each skipping its own address; a fourth
appears in DNS, joins and copies the registry; one disappears and is dropped after the grace;
the DNS server stops answering and every node keeps its peers, saying so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.dns_server import StubDns
from tests.helpers import JSON, eventually, free_port, instance_doc
from tests.nodes import TIMINGS
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

NAME = "registry-peers.test"
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]


@pytest.fixture
async def stub() -> AsyncIterator[StubDns]:
    server = await StubDns().start()
    yield server
    server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield session


@pytest.fixture
async def nodes(stub: StubDns, tmp_path: Path) -> AsyncIterator[dict[str, ServerProcess]]:
    """A node per address, not started, all on one port, finding peers through `stub`."""
    port = free_port()
    settings = {
        **TIMINGS,
        "peers__dns_name": NAME,
        "peers__dns_port": port,
        "peers__dns_nameservers": stub.server,
        "peers__dns_interval": 0.3,
        "peers__dns_grace": 1,
        "logging__format": "json",
    }
    made = {
        host: ServerProcess(tmp_path / f"{host}.log", port, settings=settings, host=host)
        for host in HOSTS
    }
    yield made
    await asyncio.gather(*(node.kill() for node in made.values()))


async def status(session: aiohttp.ClientSession, node: ServerProcess) -> dict[str, Any]:
    async with session.get(f"{node.eureka}status", headers=JSON) as response:
        result: dict[str, Any] = await response.json()
        return result


async def peers_of(session: aiohttp.ClientSession, node: ServerProcess) -> set[str]:
    return {p["url"] for p in (await status(session, node))["peers"]}


async def instances(session: aiohttp.ClientSession, node: ServerProcess, app: str) -> list[str]:
    async with session.get(f"{node.eureka}apps/{app}", headers=JSON) as response:
        if response.status != 200:
            return []
        return [i["instanceId"] for i in (await response.json())["application"]["instance"]]


async def test_nodes_find_each_other_join_leave_and_outlive_dns(
    stub: StubDns, nodes: dict[str, ServerProcess], session: aiohttp.ClientSession
):
    first = HOSTS[:3]
    stub.set(NAME, first)
    await asyncio.gather(*(nodes[h].start() for h in first))

    def others(host: str, among: list[str]) -> set[str]:
        return {nodes[h].eureka for h in among if h != host}

    for host in first:  # every node is named in DNS; each skips its own address
        await eventually(
            lambda host=host: peers_of(session, nodes[host]),
            lambda peers, host=host: peers == others(host, first),
            what=f"{host} to replicate to the two others",
        )

    a, b, c = (nodes[h] for h in first)
    async with session.post(f"{a.eureka}apps/DNSAPP", json={"instance": instance_doc("DNSAPP")}):
        pass
    for node in (b, c):
        await eventually(lambda node=node: instances(session, node, "DNSAPP"), what="replicated")

    # A fourth node appears in DNS: it copies the registry before it is ready, and joins.
    four = HOSTS
    stub.set(NAME, four)
    d = nodes[HOSTS[3]]
    await d.start()
    assert ["i-1"] == await instances(session, d, "DNSAPP")
    assert (await status(session, d))["generalStats"]["reads-reason"].startswith("copied 1 ")
    for host in four:
        await eventually(
            lambda host=host: peers_of(session, nodes[host]),
            lambda peers, host=host: peers == others(host, four),
            what=f"{host} to know the four",
        )

    # One goes from DNS (and stops): after the grace, the others drop it, saying why.
    stub.set(NAME, [h for h in four if h != HOSTS[2]])
    await c.stop()
    remaining = [HOSTS[0], HOSTS[1], HOSTS[3]]
    for host in remaining:
        await eventually(
            lambda host=host: peers_of(session, nodes[host]),
            lambda peers, host=host: peers == others(host, remaining),
            what=f"{host} to drop the node gone from DNS",
        )
    change = (await status(session, a))["membership"]["changes"][0]
    assert ("removed", c.eureka, "dns") == (change["change"], change["peer"], change["why"])

    # DNS stops answering: the peers stay, the failure is said, replication goes on.
    stub.answering = False
    for host in remaining:
        dns = await eventually(
            lambda host=host: status(session, nodes[host]),
            lambda s: s["membership"]["dns"]["failingSince"] is not None,
            what=f"{host} to see DNS fail",
        )
        assert others(host, remaining) == {p["url"] for p in dns["peers"]}
    async with session.get(f"{a.base}/metrics") as response:
        assert "registry_peer_dns_failing 1.0" in await response.text()
    doc = instance_doc("DNSAPP", "i-2")
    async with session.post(f"{d.eureka}apps/DNSAPP", json={"instance": doc}):
        pass
    await eventually(
        lambda: instances(session, a, "DNSAPP"), lambda ids: "i-2" in ids, what="replicated"
    )
