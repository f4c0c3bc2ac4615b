"""Hostile clients and the health checks they may ask the registry to run, against a real
server process with credentials on every plane (as tests/fault/test_hostile_clients.py).

A client credential must not make the registry a port scanner or an HTTP status oracle into
its networks (checks of the metadata addresses, of the node's own address, of private ranges
the operator did not list, `Host: localhost` towards an address; the outcome read on the
status page), nor an amplifier of one client into a flood at a third party (1 500
registrations asking for a check a second of one address).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from registry.checks.destinations import own_addresses
from tests.fault.test_hostile_clients import ADMIN, CLIENT, JSON, PEER, PROBE_BOUND, Server, auth
from tests.helpers import eventually, instance_doc
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

PER_ADDRESS = 10  # checks.rate_per_address of the servers below
PER_CREDENTIAL = 1000  # checks.max_per_credential (its default)
FLOOD = 1500  # registrations of the flood, one client credential
FLOOD_SECONDS = 8  # how long the target counts what reaches it


def _own_routable() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    for found in sorted(own_addresses("127.0.0.1")):
        try:
            address = ipaddress.ip_address(found.partition("%")[0])
        except ValueError:
            continue
        if not (address.is_loopback or address.is_link_local or address.version == 6):
            return str(address)
    return None


OWN = _own_routable()


class Target:
    """A service's health endpoint on loopback that counts its requests by second, and keeps
    the Host headers it was sent."""

    def __init__(self) -> None:
        self.by_second: Counter[int] = Counter()
        self.hosts: set[str] = set()

    async def health(self, request: web.Request) -> web.Response:
        self.by_second[int(time.monotonic())] += 1
        self.hosts.add(request.headers.get("Host", ""))
        return web.Response(text="ok")

    @property
    def total(self) -> int:
        return sum(self.by_second.values())

    def busiest(self) -> int:
        """Requests in the busiest whole second."""
        return max(self.by_second.values(), default=0)


@contextlib.asynccontextmanager
async def serving(target: Target, host: str = "127.0.0.1") -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/health", target.health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def _served(directory: Path, **settings: str) -> Iterator[ServerProcess]:
    settings = {
        "store__enabled": "false",
        "limits__fetch_rate_limit": "0",
        "credentials__clients": CLIENT,
        "credentials__admins": ADMIN,
        "credentials__peer": PEER,
        "checks__loopback": "true",  # the targets are on loopback
        "checks__rate_per_address": str(PER_ADDRESS),
        # Where instances live: 10/8, and this machine's own address (refused all the same)
        "checks__networks": "10.0.0.0/8" + (f",{OWN}/32" if OWN else ""),
        **settings,
    }
    server = ServerProcess(directory / "server.log", settings=settings)
    server.spawn()
    try:
        yield server
    finally:
        server.stop_blocking()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _served(tmp_path_factory.mktemp("hostile-checks")) as served:
        yield served


@pytest.fixture(scope="module")
def flooded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _served(tmp_path_factory.mktemp("flooded"), checks__rate="1000") as served:
        yield served


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _served(tmp_path_factory.mktemp("paced"), checks__rate="20") as served:
        yield served


@pytest.fixture
async def server(base: ServerProcess) -> AsyncIterator[Server]:
    async with Server.probing(base) as server:
        yield server


def checked(iid: str, ip: str, port: int = 8080, host: str = "", **metadata: str) -> dict:
    return instance_doc(
        "SCAN",
        iid,
        ipAddr=ip,
        hostName=host or ip,
        port={"$": port, "@enabled": "true"},
        healthCheckUrl=f"http://{host or ip}:{port}/health",
        metadata={"registry.check": "http", "registry.check.interval": "1", **metadata},
    )


async def register(server: Server, doc: dict, credential: str = CLIENT) -> tuple[int, dict]:
    url = server.eureka + f"apps/{doc['app']}"
    async with server.session.post(url, json={"instance": doc}, headers=auth(credential)) as r:
        body = await r.json() if r.status >= 400 else {}
        return r.status, body


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
        "0.0.0.0",
        "fd00:ec2::254",
    ],
)
async def test_checks_of_the_metadata_addresses_are_refused(server: Server, address: str):
    """Before: 100.100.100.200, 168.63.129.16 and 192.0.0.192 were taken and checked."""
    status, body = await register(server, checked("m-1", address))
    assert (400, "ipAddr") == (status, body["field"])


@pytest.mark.skipif(OWN is None, reason="this machine has no address but loopback")
async def test_a_check_of_the_nodes_own_address_is_refused(server: Server):
    """The node's own address is refused even where `checks.networks` would allow it
    (before: anything bound to 0.0.0.0 on the registry's host could be probed)."""
    status, body = await register(server, checked("o-1", str(OWN)))
    assert 400 == status
    assert "this registry node" in body["detail"]


async def test_a_private_range_outside_the_networks_is_not_checked(server: Server):
    """10.0.0.0/8 is listed; 192.168.0.0/16 and CGNAT are not (before: any was checked). Such
    an instance is registered unchecked, saying so: a registry upgraded before its operator
    listed the networks keeps its services registered."""
    assert 204 == (await register(server, checked("n-1", "10.1.2.3")))[0]
    for n, address in enumerate(("192.168.1.10", "100.64.0.1", "172.16.0.1")):
        url = server.eureka + "apps/SCAN"
        doc = {"instance": checked(f"n-{n + 2}", address)}
        async with server.session.post(url, json=doc, headers=auth(CLIENT)) as r:
            assert 204 == r.status, address
            assert "registered, not checked" in r.headers["X-Registry-Registration"]
            assert "checks.networks" in r.headers["X-Registry-Registration"]
    explain = server.eureka + "apps/SCAN/n-2/status/explain"
    async with server.session.get(explain, headers=auth(ADMIN) | JSON) as r:
        check = (await r.json())["healthCheck"]
    assert "checks.networks" in check["notCheckable"], check


async def test_the_host_header_names_the_address_and_a_client_reads_no_outcome(server: Server):
    """An instance named `localhost` is checked with the address as its Host (before: `Host:
    localhost` to the address); a client viewer's page says nothing of the check or its
    outcome, an admin's says both (before: `HTTP 200` for anyone); explain is admin's."""
    target = Target()
    async with serving(target) as port:
        doc = checked("h-1", "127.0.0.1", port, host="localhost")
        assert 204 == (await register(server, doc))[0]
        await eventually(lambda: target.total >= 1, timeout=15)
    assert {f"127.0.0.1:{port}"} == target.hosts

    async def page(credential: str) -> str:
        async with server.session.get(server.base + "/", headers=auth(credential)) as r:
            assert 200 == r.status
            return await r.text()

    seen = await page(CLIENT)
    assert "HTTP 200" not in seen and f"127.0.0.1:{port}/health" not in seen
    assert "HTTP 200" in await page(ADMIN)
    explain = server.eureka + "apps/SCAN/h-1/status/explain"
    async with server.session.get(explain, headers=auth(CLIENT)) as r:
        assert 403 == r.status
    async with server.session.delete(server.eureka + "apps/SCAN/h-1", headers=auth(CLIENT)):
        pass


async def test_a_flood_of_registrations_is_held_to_the_caps(flooded: ServerProcess) -> None:
    """1 500 registrations by one client credential, each asking a check a second of one
    address: 1 000 are taken (`health_check_max_per_credential`), each raised to a check
    every 5 s, and the address gets at most PER_ADDRESS a second from the first second on,
    while heartbeats go on (before: 22 647 requests in 22 s, up to 1 496 in one second)."""
    target = Target()
    async with Server.probing(flooded) as server, serving(target) as port:

        async def flood() -> Counter[int]:
            answers: Counter[int] = Counter()
            for start in range(0, FLOOD, 50):
                batch = [
                    register(server, checked(f"f-{i}", "127.0.0.1", port))
                    for i in range(start, start + 50)
                ]
                answers.update(status for status, _ in await asyncio.gather(*batch))
            await asyncio.sleep(FLOOD_SECONDS)
            return answers

        answers, longest = await server.probed(flood())
        async with server.session.get(server.base + "/metrics", headers=auth(CLIENT)) as r:
            metrics = await r.text()
    assert {204: PER_CREDENTIAL, 403: FLOOD - PER_CREDENTIAL} == dict(answers)
    assert target.busiest() <= PER_ADDRESS + 1, sorted(target.by_second.items())
    assert target.total <= (FLOOD_SECONDS + 5) * (PER_ADDRESS + 1)
    assert longest < PROBE_BOUND, longest
    skipped = 'registry_health_checks_skipped_total{reason="address_rate"} '
    assert float(metrics.split(skipped)[1].split()[0]) > 0
    assert f'reason="credential_limit"}} {FLOOD - PER_CREDENTIAL}.0' in metrics


async def test_the_nodes_rate_holds_from_the_first_second(paced: ServerProcess) -> None:
    """300 instances over ten addresses, due together: at most `checks.rate` (20) checks
    a second reach them all together, the first second included (before: the node's bucket
    started with a whole second of checks in it, and refilled meanwhile)."""
    targets = [Target() for _ in range(10)]
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(Server.probing(paced))
        ports = [
            await stack.enter_async_context(serving(t, f"127.0.0.{n + 2}"))
            for n, t in enumerate(targets)
        ]
        docs = [checked(f"r-{i}", f"127.0.0.{i % 10 + 2}", ports[i % 10]) for i in range(300)]
        statuses = await asyncio.gather(*(register(server, doc) for doc in docs))
        assert {204} == {status for status, _ in statuses}
        await asyncio.sleep(FLOOD_SECONDS)
    by_second: Counter[int] = Counter()
    for target in targets:
        by_second.update(target.by_second)
    assert max(by_second.values()) <= 20 + 1, sorted(by_second.items())
    assert sum(by_second.values()) >= 20 * (FLOOD_SECONDS - 3)  # and it does run them
