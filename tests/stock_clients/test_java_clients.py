"""The Java world's Eureka clients, unmodified, against our server: Spring Cloud Netflix's in a
Spring Boot service (tests/stock_clients/spring/) on both release trains and both transports
each offers, and Netflix's own without Spring (tests/stock_clients/netflix/), each built with
Maven and run as a real process.

Its whole life cycle, with Eureka's 30 s intervals shortened to 1 s: it registers and renews;
our asyncio client sees it; it discovers another service through Spring's DiscoveryClient,
drops it while an admin holds it OUT_OF_SERVICE and takes it back when the override goes;
registers again when the server forgot it (404 on its heartbeat); follows a status change of
its own; keeps its copy by deltas, checked by their hashcode, not by full fetches; cancels at
shutdown. Then across two peered nodes. No transport can ask for XML (all send
`Accept: application/json`), so the Java clients read JSON only; XML is the other clients'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from registry import Settings, SystemClock, create_app
from registry.appkeys import REGISTRY, REQUESTS
from registry.client import DiscoveryClient
from registry.core.registry import Registry
from tests.helpers import eventually, free_ports
from tests.stock_clients.agent import running_agent
from tests.stock_clients.java import JavaService, build, need_java

pytestmark = [pytest.mark.slow, pytest.mark.java]

SPRING = Path(__file__).parent / "spring"
NETFLIX = Path(__file__).parent / "netflix"
TIMEOUT = 30.0  # for what the client does on its 1 s intervals, on a busy machine


@dataclass(frozen=True)
class Java:
    """One Java client to run: its jar, what it is told, the TransportClientFactories it must
    then use, and whether it cancels at shutdown."""

    jar: str
    transport: str
    args: tuple[str, ...] = ()
    cancels: bool = True

    def __str__(self) -> str:
        return f"{self.jar}-{self.transport.removesuffix('TransportClientFactories')}"


WEBCLIENT = ("--eureka.client.webclient.enabled=true",)
CLIENTS = [
    Java("spring-2025.1", "RestClientTransportClientFactories"),
    Java("spring-2025.1", "WebClientTransportClientFactories", WEBCLIENT),
    Java("spring-2025.0", "RestTemplateTransportClientFactories"),
    # The 2025.0 train's WebClient transport cannot cancel: its event loop is stopped first
    # ("event executor terminated"; spring-cloud-netflix#4055 and #4488).
    Java("spring-2025.0", "WebClientTransportClientFactories", WEBCLIENT, cancels=False),
    Java("netflix", "Jersey3TransportClientFactories"),
]
LEASE = 10  # seconds: the service's lease duration (spring/src/main/resources)


@pytest.fixture(scope="session")
def jars() -> Iterator[dict[str, Path]]:
    """The Java services, built once a run: the Spring one for each release train."""
    need_java()
    build(SPRING)
    build(SPRING, "train-2025.0")
    build(NETFLIX)
    yield {
        "spring-2025.1": SPRING / "target" / "2025.1" / "spring-client.jar",
        "spring-2025.0": SPRING / "target" / "2025.0" / "spring-client.jar",
        "netflix": NETFLIX / "target" / "netflix-client.jar",
    }


@pytest.fixture
def blockbuster():
    """The Java process is outside this loop; the server half is covered elsewhere."""
    return None


def statuses(registry: Registry, app: str) -> dict[str, str]:
    """Instance id -> status of `app`'s live instances."""
    now_ms = SystemClock().wall_ms()
    return {
        lease.instance.instance_id: lease.instance.status.value
        for lease in registry.application(app)
        if not lease.is_expired(now_ms)
    }


def fetches(client: TestClient) -> dict[str, int]:
    """GET requests answered 200, by endpoint."""
    counted: dict[str, int] = {}
    for family in client.app[REQUESTS].collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_count") and (labels["method"], labels["status"]) == (
                "GET",
                "200",
            ):
                counted[labels["endpoint"]] = int(sample.value)
    return counted


@asynccontextmanager
async def java_service(
    java: Java, jars: dict[str, Path], log: Path, eureka: str
) -> AsyncIterator[JavaService]:
    """`java`'s service, named ORDERS, registered with the server at `eureka`."""
    service = JavaService(jars[java.jar], log)
    port = service.port
    try:
        if java.jar == "netflix":
            await service.start(
                jvm_args=[
                    f"-Dcontrol.port={port}",
                    f"-Deureka.serviceUrl.default={eureka}",
                    "-Deureka.name=orders",
                    "-Deureka.vipAddress=orders",
                    f"-Deureka.port={port}",
                    f"-Deureka.instanceId=orders:{port}",
                ]
            )
        else:
            await service.start(
                args=[
                    f"--server.port={port}",
                    "--spring.application.name=orders",
                    f"--eureka.client.service-url.defaultZone={eureka}",
                    *java.args,
                ]
            )
        yield service
    finally:
        service.kill()


def billing(eureka: str) -> DiscoveryClient:
    """Another service, registered by our asyncio client, heartbeating every second."""
    return DiscoveryClient(
        eureka,
        app="billing",
        port=9090,
        instance_id="billing-1",
        host_name="127.0.0.1",
        ip_addr="127.0.0.1",
        renewal_interval=1,
    )


async def seen(service: JavaService, app: str) -> list[str]:
    return [found["instanceId"] for found in await service.call("GET", f"/seen/{app}")]


@pytest.mark.parametrize("java", CLIENTS, ids=str)
async def test_the_life_cycle(
    aiohttp_client: Any, jars: dict[str, Path], tmp_path: Path, java: Java
) -> None:
    client: TestClient = await aiohttp_client(
        TestServer(
            create_app(Settings.of(store__enabled=False, leases__eviction_interval=1)),
            host="127.0.0.1",
        )
    )
    registry = client.app[REGISTRY]
    eureka = str(client.make_url("/eureka/"))
    async with (
        billing(eureka) as ours,
        java_service(java, jars, tmp_path / "java.log", eureka) as service,
    ):
        state = await service.call("GET", "/state")
        assert [java.transport] == state["transport"]
        iid = state["instanceId"]

        # It registers, UP, and renews.
        await eventually(
            lambda: statuses(registry, "ORDERS"),
            lambda value: value == {iid: "UP"},
            timeout=TIMEOUT,
            what="registered UP",
        )
        renewed = registry.get("ORDERS", iid, now_ms=SystemClock().wall_ms()).last_renewal_ms
        await eventually(
            lambda: registry.get("ORDERS", iid, now_ms=SystemClock().wall_ms()).last_renewal_ms,
            lambda last: last > renewed,
            timeout=TIMEOUT,
            what="a heartbeat",
        )

        # Our client sees it; it sees ours (through Spring's DiscoveryClient, for Spring).
        await eventually(
            lambda: [i.instance_id for i in ours.instances("ORDERS")],
            lambda value: value == [iid],
            timeout=TIMEOUT,
            what="our client sees it",
        )
        await eventually(
            lambda: seen(service, "billing"),
            lambda value: value == ["billing-1"],
            timeout=TIMEOUT,
            what="it sees billing",
        )

        # An admin takes billing out of service: Spring lists UP instances only.
        response = await client.put("/eureka/apps/BILLING/billing-1/status?value=OUT_OF_SERVICE")
        assert 200 == response.status
        await eventually(
            lambda: seen(service, "billing"),
            lambda value: value == [],
            timeout=TIMEOUT,
            what="billing dropped",
        )
        # The override goes (UNKNOWN: billing's next heartbeat is a 404, it registers again).
        response = await client.delete("/eureka/apps/BILLING/billing-1/status")
        assert 200 == response.status
        await eventually(
            lambda: seen(service, "billing"),
            lambda value: value == ["billing-1"],
            timeout=TIMEOUT,
            what="billing back",
        )

        # The server forgets it: its next heartbeat is a 404, and it registers again.
        response = await client.delete(f"/eureka/apps/ORDERS/{iid}")
        assert 200 == response.status
        assert {} == statuses(registry, "ORDERS")
        await eventually(
            lambda: statuses(registry, "ORDERS"),
            lambda value: value == {iid: "UP"},
            timeout=TIMEOUT,
            what="registered again",
        )

        # A status change of its own reaches the registry, and the other clients.
        await service.call("PUT", "/status/DOWN")
        await eventually(
            lambda: statuses(registry, "ORDERS"),
            lambda value: value == {iid: "DOWN"},
            timeout=TIMEOUT,
            what="DOWN",
        )
        await eventually(
            lambda: [i.status.value for i in ours.instances("ORDERS", all_statuses=True)],
            lambda value: value == ["DOWN"],
            timeout=TIMEOUT,
            what="our client sees DOWN",
        )
        await service.call("PUT", "/status/UP")
        await eventually(
            lambda: statuses(registry, "ORDERS"),
            lambda value: value == {iid: "UP"},
            timeout=TIMEOUT,
            what="UP again",
        )

        # Its copy follows by deltas, each checked by its hashcode: it holds what we hold,
        # and it fetched in full only at the start (a hashcode that did not match would
        # have made it fetch in full again).
        await eventually(
            lambda: service.call("GET", "/state"),
            lambda state: state["appsHashCode"] == registry.reconcile_hash(),
            timeout=TIMEOUT,
            what="its copy's hashcode matches",
        )
        counted = await eventually(
            lambda: fetches(client),
            lambda counted: counted.get("/eureka/apps/{app:delta}", 0) >= 5,
            timeout=TIMEOUT,
            what="five deltas fetched",
        )
        assert counted.get("/eureka/apps", 0) <= 2, counted  # its first, and ours

        # It cancels at shutdown; where its transport cannot, its lease runs out and the
        # registry evicts it within the lease and a sweep (Eureka: twice the lease and up to
        # a minute more).
        assert await service.stop() in (0, 143)  # 143: the JVM's exit on SIGTERM
        if java.cancels:
            assert {} == statuses(registry, "ORDERS")
        else:
            assert {iid: "DOWN"} == statuses(registry, "ORDERS")
            await eventually(
                lambda: registry.evictions,
                lambda evictions: evictions >= 1,
                timeout=LEASE + 5,
                what="evicted",
            )
            assert {} == statuses(registry, "ORDERS")


async def test_the_spring_client_across_two_peered_nodes(
    aiohttp_client: Any, jars: dict[str, Path], tmp_path: Path
) -> None:
    """It registers with node A only, and our client with node B: each sees the other through
    replication (py-eureka-client on B sees it too); an admin's override made on B reaches it
    through A; its status change and its cancel reach B."""
    ports = free_ports(2)
    urls = [f"http://127.0.0.1:{port}/eureka/" for port in ports]

    async def node(port: int, peer: str) -> TestClient:
        settings = Settings.of(
            store__enabled=False,
            peers__urls=(peer,),
            leases__eviction_interval=1,
            peers__sync_budget=1,
            peers__sync_empty_window=1,
        )
        server = TestServer(create_app(settings), host="127.0.0.1", port=port)
        return await aiohttp_client(server)

    a = await node(ports[0], urls[1])
    b = await node(ports[1], urls[0])
    registry_b = b.app[REGISTRY]
    await eventually(
        lambda: a.get("/eureka/apps", headers={"Accept": "application/json"}),
        lambda response: response.status == 200,
        timeout=TIMEOUT,
        what="node A serves reads",
    )
    async with (
        billing(urls[1]) as ours,
        java_service(CLIENTS[0], jars, tmp_path / "java.log", urls[0]) as spring,
    ):
        iid = (await spring.call("GET", "/state"))["instanceId"]
        await eventually(
            lambda: statuses(registry_b, "ORDERS"),
            lambda value: value == {iid: "UP"},
            timeout=TIMEOUT,
            what="replicated to B",
        )
        await eventually(
            lambda: [i.instance_id for i in ours.instances("ORDERS")],
            lambda value: value == [iid],
            timeout=TIMEOUT,
            what="our client on B sees it",
        )
        await eventually(
            lambda: seen(spring, "billing"),
            lambda value: value == ["billing-1"],
            timeout=TIMEOUT,
            what="it sees billing, registered on B",
        )
        async with running_agent(urls[1]) as agent:  # py-eureka-client, which reads XML
            assert "started" == (await agent.answer())["event"]
            await eventually(
                lambda: agent.ask("view"),
                lambda view: view["applications"].get("ORDERS") == {iid: "UP"},
                timeout=TIMEOUT,
                what="py-eureka-client on B sees it",
            )
        response = await b.put("/eureka/apps/BILLING/billing-1/status?value=OUT_OF_SERVICE")
        assert 200 == response.status
        await eventually(
            lambda: seen(spring, "billing"),
            lambda value: value == [],
            timeout=TIMEOUT,
            what="B's override reaches it through A",
        )
        await spring.call("PUT", "/status/DOWN")
        await eventually(
            lambda: statuses(registry_b, "ORDERS"),
            lambda value: value == {iid: "DOWN"},
            timeout=TIMEOUT,
            what="its DOWN on B",
        )
        await spring.call("PUT", "/status/UP")
        assert await spring.stop() in (0, 143)
        await eventually(
            lambda: statuses(registry_b, "ORDERS"),
            lambda value: value == {},
            timeout=TIMEOUT,
            what="its cancel on B",
        )
