"""A live Eureka cluster moved to this registry node by node, as docs/migration.md tells an
operator to, with real processes throughout.

Two stock Spring Cloud Eureka nodes (tests/bench/eureka_server) are peered as Spring's docs
cluster them, and set to copy their peers when they start (docs/migration.md says why);
neither registers itself. Three Spring services (tests/stock_clients/spring) register with
them and fetch every second, with Eureka's own lease timings (30 s renewals, 90 s leases); two
instances of a fourth service run on our asyncio client, given every server's address from
the start (it stays with the first that answers, a stock node, until that one fails), and an
admin holds one of them OUT_OF_SERVICE. Then, with our nodes on
their default settings (their store on): a node of ours joins; the stock nodes' peer lists are
rolled to include it, a restart each; an admin's second override is made on ours; the services
are redeployed, one at a time, with ours in their lists; a second node of ours joins and goes
into every list; the first node of ours restarts from its store; the services are redeployed
with our nodes alone; the stock nodes leave one at a time.

All the while a watcher reads every node that serves reads (a stock node but while it
restarts) and every Spring service's view: no instance whose service runs (and registered some
seconds ago) may be missing anywhere. At the end nothing was evicted on any node, both
overrides stand on ours, and our nodes agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from registry.client import DiscoveryClient
from tests.helpers import eventually, free_ports
from tests.processes import ServerProcess
from tests.stock_clients.java import JavaService, build, need_java

pytestmark = [pytest.mark.slow, pytest.mark.java]

EUREKA_SERVER = Path(__file__).parents[1] / "bench" / "eureka_server"
SPRING = Path(__file__).parent / "spring"
JSON = {"Accept": "application/json"}
# Eureka's own timings for the services (the project's properties shorten them for the life
# cycle test): until the stock nodes replicate to ours, their registry renews our copies.
EUREKA_LEASES = (
    "--eureka.instance.lease-renewal-interval-in-seconds=30",
    "--eureka.instance.lease-expiration-duration-in-seconds=90",
)
# Clustered as Spring's docs have it, less the self-registration (a stopped stock node's own
# lease would run out and be evicted, which the test counts as a failure), and copying a peer
# at start (Spring's default is not to: a restarted node would serve an empty registry that
# fills as heartbeats come), and read without the read-only response cache.
STOCK = (
    "--eureka.client.fetch-registry=true",
    "--eureka.client.register-with-eureka=false",
    "--eureka.server.registry-sync-retries=5",
    "--eureka.server.registry-sync-retry-wait-ms=2000",
    # As Spring's docs suggest for quicker propagation; with it on, a registration shows in a
    # stock node's reads up to 30 s later, which the watcher would count as missing.
    "--eureka.server.use-read-only-response-cache=false",
)
SETTLED = 10.0  # seconds after a service's start before every node and service must show it
TIMEOUT = 60.0  # for a step to show on every node, on a busy 2-core machine
INVENTORY = "INVENTORY"  # on our asyncio client: an admin's overrides sit on its instances


@pytest.fixture(scope="module")
def jars() -> dict[str, Path]:
    need_java()
    build(EUREKA_SERVER)
    build(SPRING)
    return {
        "eureka": EUREKA_SERVER / "target" / "eureka-server.jar",
        "spring": SPRING / "target" / "2025.1" / "spring-client.jar",
    }


@pytest.fixture
def blockbuster():
    """Every part runs in a process of its own."""
    return None


@dataclass
class Service:
    """A Spring service's process, and since when its instance must show everywhere."""

    app: str
    process: JavaService
    settled_at: float | None = None

    @property
    def instance_id(self) -> str:
        return f"{self.app.lower()}:{self.process.port}"

    async def deploy(self, servers: list[str]) -> None:
        """(Re)start it with `servers` as its list; it registers with one of them."""
        self.settled_at = None
        if self.process.running:
            await self.process.stop()
        await self.process.start(
            args=[
                f"--server.port={self.process.port}",
                f"--spring.application.name={self.app.lower()}",
                f"--eureka.client.service-url.defaultZone={','.join(servers)}",
                *EUREKA_LEASES,
            ]
        )
        self.settled_at = asyncio.get_running_loop().time() + SETTLED

    def settled(self) -> bool:
        return self.settled_at is not None and asyncio.get_running_loop().time() > self.settled_at


@dataclass
class Watcher:
    """Reads every node and every service's view twice a second; what a live instance was
    missing from."""

    session: aiohttp.ClientSession
    services: list[Service]
    always: set[str]  # instances that live throughout
    nodes: dict[str, str] = field(default_factory=dict)  # name -> Eureka URL, while it runs
    missing: list[str] = field(default_factory=list)  # "seconds in: where lacks what"
    reads: int = 0  # of nodes' registries
    views: int = 0  # of services' views
    started: float = field(default_factory=lambda: asyncio.get_running_loop().time())

    async def run(self) -> None:
        while True:
            await self.look()
            await asyncio.sleep(0.5)

    async def look(self) -> None:
        expected = {s.instance_id for s in self.services if s.settled()} | self.always
        at = f"{asyncio.get_running_loop().time() - self.started:.1f} s:"
        for name, url in list(self.nodes.items()):
            held = await self._held(url)
            if held is not None:
                self.reads += 1
                self.missing += [f"{at} {name} lacks {iid}" for iid in sorted(expected - held)]
        for service in self.services:
            if not service.settled():
                continue
            for other in ("ORDERS", "BILLING"):
                seen = await self._seen(service, other.lower())
                wanted = {s.instance_id for s in self.services if s.app == other} & expected
                if seen is not None:
                    self.views += 1
                    lacking = sorted(wanted - seen)
                    self.missing += [f"{at} {service.instance_id} lacks {i}" for i in lacking]

    async def _held(self, url: str) -> set[str] | None:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with self.session.get(url + "apps", headers=JSON) as response:
                if response.status == 200:
                    return ids(await response.json())
        return None  # stopping, starting, or not serving reads yet

    async def _seen(self, service: Service, app: str) -> set[str] | None:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with self.session.get(f"{service.process.base}/seen/{app}") as response:
                if response.status == 200:
                    return {found["instanceId"] for found in await response.json()}
        return None


def ids(document: dict[str, Any]) -> set[str]:
    return {
        instance["instanceId"]
        for app in document["applications"]["application"]
        for instance in app["instance"]
    }


@contextlib.asynccontextmanager
async def watching(watcher: Watcher) -> AsyncIterator[Watcher]:
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Ours:
    """A node of ours on default settings, its peers in a settings file (SIGHUP re-reads it)."""

    def __init__(self, directory: Path, port: int) -> None:
        directory.mkdir()
        self.config = directory / "registry.toml"
        self.server = ServerProcess(
            directory / "registry.log",
            port,
            settings={"store__data_dir": str(directory / "data"), "logging__format": "json"},
            args=["--config", str(self.config)],
        )
        self.url = self.server.eureka

    def peer_with(self, peers: list[str]) -> None:
        self.config.write_text(f"[peers]\nurls = {orjson.dumps(peers).decode()}\n")

    async def start(self) -> None:
        await self.server.start(timeout=TIMEOUT)

    def log_events(self) -> Iterator[str]:
        for line in self.server.log_text().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                yield str(orjson.loads(line).get("event"))


async def test_a_stock_cluster_moves_to_ours_node_by_node(
    jars: dict[str, Path], tmp_path: Path
) -> None:
    stock = [
        JavaService(jars["eureka"], tmp_path / f"eureka-{n}.log", ready_path="/eureka/apps")
        for n in (1, 2)
    ]
    stock_urls = [f"{s.base}/eureka/" for s in stock]
    ours = [Ours(tmp_path / f"ours-{n}", port) for n, port in enumerate(free_ports(2), 1)]
    services = [
        Service(app, JavaService(jars["spring"], tmp_path / f"{app}-{n}.log"))
        for n, app in enumerate(("ORDERS", "ORDERS", "BILLING"))
    ]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        inventory = [
            DiscoveryClient(
                ",".join([*stock_urls, *(mine.url for mine in ours)]),
                app=INVENTORY,
                port=9000 + n,
                instance_id=f"inv-{n}",
                host_name="127.0.0.1",
                ip_addr="127.0.0.1",
            )
            for n in (1, 2)
        ]
        watcher = Watcher(session, services, {"inv-1", "inv-2"})

        async def apps(url: str) -> dict[str, Any] | None:
            async with session.get(url + "apps", headers=JSON) as response:
                return await response.json() if response.status == 200 else None

        async def apps_paced(url: str) -> dict[str, Any] | None:
            """As a client polls: our nodes answer 429 past `fetch_rate_limit` an address."""
            await asyncio.sleep(0.5)
            return await apps(url)

        async def status_of(url: str, iid: str) -> str | None:
            async with session.get(f"{url}apps/{INVENTORY}/{iid}", headers=JSON) as response:
                return (await response.json())["instance"]["status"] if response.ok else None

        async def holds_all(url: str) -> None:
            wanted = {s.instance_id for s in services} | watcher.always
            await eventually(
                lambda: apps_paced(url),
                lambda doc: doc is not None and wanted <= ids(doc),
                timeout=TIMEOUT,
                what=f"{url} holds every instance",
            )

        async def agree(*urls: str) -> None:
            async def found() -> list[tuple[str, frozenset[str]] | None]:
                docs = [await apps_paced(url) for url in urls]
                return [
                    (doc["applications"]["apps__hashcode"], frozenset(ids(doc)))
                    if doc is not None
                    else None
                    for doc in docs
                ]

            await eventually(
                found,
                lambda views: None not in views and len(set(views)) == 1,
                timeout=TIMEOUT,
                what=f"{urls} agree",
            )

        async def start_stock(node: int, peers: list[str]) -> None:
            """(Re)start a stock node with `peers` as its list; watched once it holds all."""
            name = f"eureka-{node + 1}"
            watched = watcher.nodes.pop(name, None)
            if stock[node].running:
                await stock[node].stop()
            await stock[node].start(
                args=[
                    f"--server.port={stock[node].port}",
                    f"--eureka.client.service-url.defaultZone={','.join(peers)}",
                    *STOCK,
                ]
            )
            if watched:
                await holds_all(stock_urls[node])
                watcher.nodes[name] = stock_urls[node]

        try:
            # The stock cluster, before anything of ours exists.
            await asyncio.gather(start_stock(0, [stock_urls[1]]), start_stock(1, [stock_urls[0]]))
            for client in inventory:
                await client.__aenter__()
            await eventually(
                lambda: status_of(stock_urls[0], "inv-1"), timeout=TIMEOUT, what="inv-1 is up"
            )
            path = f"apps/{INVENTORY}/inv-1/status?value=OUT_OF_SERVICE"
            async with session.put(stock_urls[0] + path) as response:
                assert 200 == response.status
            await asyncio.gather(*(s.deploy(stock_urls) for s in services))
            for url in stock_urls:
                await holds_all(url)
            watcher.nodes.update({f"eureka-{n}": url for n, url in enumerate(stock_urls, 1)})

            async with watching(watcher):
                # 1. The first node of ours copies a stock node, and serves all of it.
                ours[0].peer_with(stock_urls)
                await ours[0].start()
                watcher.nodes["ours-1"] = ours[0].url
                await holds_all(ours[0].url)
                assert "OUT_OF_SERVICE" == await status_of(ours[0].url, "inv-1")

                # 2. Each stock node restarts with ours in its list, and copies its peers.
                await start_stock(0, [stock_urls[1], ours[0].url])
                await start_stock(1, [stock_urls[0], ours[0].url])
                await agree(*stock_urls, ours[0].url)

                # An admin's override made on ours reaches the stock nodes.
                path = f"apps/{INVENTORY}/inv-2/status?value=OUT_OF_SERVICE&reason=drill"
                async with session.put(ours[0].url + path) as response:
                    assert 200 == response.status
                for url in stock_urls:
                    await eventually(
                        lambda url=url: status_of(url, "inv-2"),
                        lambda status: status == "OUT_OF_SERVICE",
                        timeout=TIMEOUT,
                        what=f"the override made on ours reaches {url}",
                    )

                # 3. The services are redeployed with ours in their lists, one at a time.
                for service in services:
                    await service.deploy([*stock_urls, ours[0].url])

                # 4. The second node of ours, in every list.
                everyone = [*stock_urls, ours[0].url, ours[1].url]
                ours[1].peer_with([*stock_urls, ours[0].url])
                await ours[1].start()
                watcher.nodes["ours-2"] = ours[1].url
                ours[0].peer_with([*stock_urls, ours[1].url])
                ours[0].server.send_signal(signal.SIGHUP)
                await start_stock(0, [u for u in everyone if u != stock_urls[0]])
                await start_stock(1, [u for u in everyone if u != stock_urls[1]])
                await agree(*stock_urls, ours[0].url, ours[1].url)

                # A node of ours restarts from its store, and the cluster agrees again.
                await ours[0].server.stop()
                await ours[0].start()
                await agree(*stock_urls, ours[0].url, ours[1].url)

                # 5. The services move to ours alone; the stock nodes leave, one at a time.
                for service in services:
                    await service.deploy([ours[0].url, ours[1].url])
                for node in range(len(stock)):
                    for mine, other in ((ours[0], ours[1]), (ours[1], ours[0])):
                        mine.peer_with([*stock_urls[node + 1 :], other.url])
                        mine.server.send_signal(signal.SIGHUP)
                    del watcher.nodes[f"eureka-{node + 1}"]
                    await stock[node].stop()
                    await agree(ours[0].url, ours[1].url)
                await watcher.look()

            assert [] == watcher.missing, "\n".join(watcher.missing)
            assert min(watcher.reads, watcher.views) > 100, "too little read to judge"
            for url in (ours[0].url, ours[1].url):
                await holds_all(url)
                for iid in ("inv-1", "inv-2"):
                    assert "OUT_OF_SERVICE" == await status_of(url, iid), (url, iid)
            for mine in ours:
                assert "lease_evicted" not in set(mine.log_events())
            for eureka in stock:
                assert "expired lease" not in eureka.tail(10_000_000)
        finally:
            for client in inventory:
                with contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
            for service in services:
                service.process.kill()
            for eureka in stock:
                eureka.kill()
            for mine in ours:
                await mine.server.kill()
