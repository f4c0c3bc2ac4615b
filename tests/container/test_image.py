"""The registry's image under podman: it builds, runs as an unprivileged user without build tools,
serves one node from its volume, and three containers on one network find each other through
its DNS (a name every container carries as an alias, as a headless Service's name answers with
every pod), replicate, and take back a node that was killed.

Slow: a minute to build the base the first time (then kept), about fifteen seconds for the
wheelhouse and the image, a few for the containers' steps; each is timed (pytest -s shows it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.container.podman import (
    Containers,
    Node,
    Podman,
    base_image,
    build_image,
    find_podman,
    timed,
    wheelhouse,
)
from tests.helpers import JSON, eventually, instance_doc

pytestmark = pytest.mark.slow

AS_CLIENT = {"Authorization": aiohttp.encode_basic_auth("client", "client-secret")}
# Credentials on every plane, as in production: the image binds every interface, and the
# server refuses that without them.
CREDENTIALS = {
    "credentials__clients": "client:client-secret",
    "credentials__admins": "admin:admin-secret",
    "credentials__peer": "peer:peer-secret",
    "logging__format": "json",
}
PEERS = "registry-peers"  # the alias all three nodes carry
CLUSTER = CREDENTIALS | {
    "peers__dns_name": PEERS,
    "peers__dns_interval": 1,
    "peers__dns_grace": 2,  # a killed node's old address leaves the others' lists quickly
}
START_TIMEOUT = 60.0  # from `podman run` to /readyz 200, on a busy 2-core machine
CONVERGE_TIMEOUT = 30.0  # peers found, a change replicated: DNS every second, retries


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    return find_podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The project's image, built for these tests on the cached base, removed after them."""
    with timed("base image found or built, and tried"):
        base = base_image(podman)
    with timed("wheelhouse made"):
        wheels = wheelhouse(tmp_path_factory.mktemp("wheels"))
    with timed("image built"):
        name = build_image(podman, base, wheels)
    yield name
    podman.run("rmi", "--force", name, check=False)


@pytest.fixture
def containers(podman: Podman, image: str) -> Iterator[Containers]:
    pool = Containers(podman, image)
    try:
        yield pool
    finally:
        pool.remove_all()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout, headers=AS_CLIENT) as session:
        yield session


async def answer(http: aiohttp.ClientSession, node: Node, path: str) -> tuple[int, Any]:
    """GET `path` of `node`: its status and JSON body; 0 and the error while it does not
    answer (not started yet, or killed)."""
    try:
        async with http.get(node.base + path, headers=JSON) as response:
            body = await response.read()
            return response.status, orjson.loads(body) if body else None
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, repr(exc)


async def wait_answer(http: aiohttp.ClientSession, node: Node, path: str) -> None:
    """Until GET `path` of `node` answers 200; its log when it does not in time."""
    try:
        await eventually(
            lambda: answer(http, node, path),
            lambda found: found[0] == 200,
            timeout=START_TIMEOUT,
            what=f"{node.name} {path}",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{node.logs()}") from None


async def wait_ready(http: aiohttp.ClientSession, node: Node) -> None:
    """Until `node` is alive (/healthz) and ready (/readyz)."""
    await wait_answer(http, node, "/healthz")
    await wait_answer(http, node, "/readyz")


async def register(http: aiohttp.ClientSession, node: Node, app: str, iid: str) -> None:
    # A lease longer than the test, so that no eviction runs into what it checks.
    doc = instance_doc(app, iid, leaseInfo={"renewalIntervalInSecs": 30, "durationInSecs": 600})
    async with http.post(
        f"{node.base}/eureka/apps/{app}",
        data=orjson.dumps({"instance": doc}),
        headers={"Content-Type": "application/json"},
    ) as response:
        assert 204 == response.status, await response.text()


async def has_instance(http: aiohttp.ClientSession, node: Node, app: str, iid: str) -> bool:
    status, body = await answer(http, node, f"/eureka/apps/{app}/{iid}")
    return status == 200 and body["instance"]["instanceId"] == iid


async def wait_instance(http: aiohttp.ClientSession, node: Node, app: str, iid: str) -> None:
    await eventually(
        lambda: has_instance(http, node, app, iid),
        timeout=CONVERGE_TIMEOUT,
        what=f"{app}/{iid} on {node.name}",
    )


async def peer_urls(http: aiohttp.ClientSession, node: Node) -> set[str]:
    """The peers `node` replicates to, by URL, from its `GET /eureka/status`."""
    status, body = await answer(http, node, "/eureka/status")
    return {peer["url"] for peer in body["peers"]} if status == 200 else set()


async def wait_peers(containers: Containers, http: aiohttp.ClientSession) -> None:
    """Until each node lists every other, at its address now, and only them, as its peers."""
    addresses = {node: await node.address(containers.network) for node in containers.nodes}
    for node in containers.nodes:
        others = {url(address) for other, address in addresses.items() if other is not node}
        await wait_peer_urls(http, node, others)


async def wait_peer_urls(http: aiohttp.ClientSession, node: Node, expected: set[str]) -> None:
    await eventually(
        lambda: peer_urls(http, node),
        lambda found: found == expected,
        timeout=CONVERGE_TIMEOUT,
        what=f"{node.name} lists {sorted(expected)} as its peers",
    )


def url(address: str) -> str:
    """A node's URL as its peers found it through DNS."""
    return f"http://{address}:8761/eureka/"


class TestImage:
    async def test_one_node_serves_from_its_volume(
        self, containers: Containers, http: aiohttp.ClientSession
    ) -> None:
        """One node is ready, runs as a user that is not root, has no compiler and no pip, and
        keeps what it is told on /data."""
        node = containers.node(CREDENTIALS)
        with timed("one node started and ready"):
            await node.start()
            await wait_ready(http, node)
        assert "0" != (await node.exec("id", "-u")).strip()
        tools = await node.exec("sh", "-c", "command -v gcc cc c++ make pip pip3 || true")
        assert "" == tools.strip()
        await register(http, node, "ORDERS", "i-1")
        assert await has_instance(http, node, "ORDERS", "i-1")
        assert "registry.db" in (await node.exec("ls", "/data")).split()


class TestCluster:
    async def test_three_nodes_find_replicate_and_recover(
        self, containers: Containers, http: aiohttp.ClientSession
    ) -> None:
        """Three nodes find each other by the network alias, a registration on one is read
        on the others, and a node killed and started again is ready with it and with what
        was registered while it was down, its peers listing it again."""
        nodes = [containers.node(CLUSTER, aliases=(PEERS,)) for _ in range(3)]
        with timed("three nodes started and ready"):
            for node in nodes:
                await node.start()
            for node in nodes:
                await wait_ready(http, node)

        with timed("each node lists the other two as peers"):
            await wait_peers(containers, http)

        first, second, third = nodes
        with timed("a registration on one node read on the other two"):
            await register(http, first, "ORDERS", "i-1")
            await wait_instance(http, second, "ORDERS", "i-1")
            await wait_instance(http, third, "ORDERS", "i-1")

        with timed("a node killed, the others serving and replicating"):
            await first.kill()
            for node in (second, third):
                assert 200 == (await answer(http, node, "/readyz"))[0]
                assert await has_instance(http, node, "ORDERS", "i-1")
            await register(http, second, "ORDERS", "i-2")
            await wait_instance(http, third, "ORDERS", "i-2")

        with timed("the killed node started again and ready, with both registrations"):
            await first.start_again()
            await wait_ready(http, first)
            assert await has_instance(http, first, "ORDERS", "i-1")  # its volume, or its peers
            await wait_instance(http, first, "ORDERS", "i-2")  # only its peers had this one

        with timed("each node lists the other two again"):
            await wait_peers(containers, http)
