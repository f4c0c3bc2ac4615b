"""Hostile and clumsy clients against a real server process with credentials on every plane.

Each attack runs while a probe heartbeats one instance every PROBE_INTERVAL on a connection of
its own; the attack must get its clear refusal, leave the registry as it was, and the probe's
longest round trip must stay under PROBE_BOUND (what each attack cost before it was fixed is
in its test's docstring).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.helpers import free_port, instance_doc, registry_process, until_ready

pytestmark = pytest.mark.slow

CLIENT = "svc:s3cret"
ADMIN = "ops:adm1n-pw"
PEER = "peer:p33r-pw"
PROBE_INTERVAL = 0.01
PROBE_BOUND = 0.3  # seconds: a heartbeat is a lookup; a stall is what the attacks caused
JSON = {"Accept": "application/json"}


def auth(credential: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credential.encode()).decode()}


class Server:
    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base = base
        self.eureka = base + "/eureka/"
        self.session = session

    async def probed(self, attack: Awaitable[Any]) -> tuple[Any, float]:
        """What `attack` returned, and the longest heartbeat round trip (s) while it ran."""
        longest = 0.0
        done = asyncio.Event()

        async def probe() -> None:
            nonlocal longest
            url, headers = self.eureka + "apps/PROBE/p-1", auth(CLIENT)
            while not done.is_set():
                started = time.perf_counter()
                async with self.session.put(url, headers=headers) as response:
                    assert 200 == response.status
                longest = max(longest, time.perf_counter() - started)
                await asyncio.sleep(PROBE_INTERVAL)

        probing = asyncio.ensure_future(probe())
        try:
            await asyncio.sleep(0.2)  # the probe's connection is open and warm
            result = await attack
            await asyncio.sleep(0.5)  # and what the server does after answering
        finally:
            done.set()
            await probing
        return result, longest

    async def registry(self) -> dict[str, Any]:
        async with self.session.get(self.eureka + "apps", headers=JSON | auth(CLIENT)) as r:
            assert 200 == r.status
            return orjson.loads(await r.read())  # type: ignore[no-any-return]


@contextlib.contextmanager
def _served(directory: Path, **settings: str) -> Iterator[str]:
    """A server process with no store and no fetch limit, and `settings`; its base URL."""
    port = free_port()
    with (directory / "server.log").open("wb") as log:
        settings = {"store": "false", "fetch_rate_limit": "0", **settings}
        process = registry_process(port, settings, log)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(20)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server most attacks share, with credentials on every plane."""
    directory = tmp_path_factory.mktemp("hostile")
    with _served(
        directory, client_credentials=CLIENT, admin_credentials=ADMIN, peer_credential=PEER
    ) as url:
        yield url


@pytest.fixture
async def server(base: str) -> AsyncIterator[Server]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await until_ready(session, base)
        doc = {"instance": instance_doc("PROBE", "p-1")}
        async with session.post(base + "/eureka/apps/PROBE", json=doc, headers=auth(CLIENT)) as r:
            assert 204 == r.status
        yield Server(base, session)


# Compressed bodies ---------------------------------------------------------------------------


def _bomb(inflated: int = 1 << 30) -> bytes:
    """`inflated` bytes of zeros, gzipped: about a thousandth of that on the wire."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(inflated >> 20)) + compressor.flush()


BOMB = _bomb()


async def test_gzip_bombs_to_any_path_cost_nothing_to_inflate(server: Server) -> None:
    """Four bombs at once (1 GB of zeros each, 1 MB on the wire) to a path that does not exist,
    a method a route does not take, a registration without credentials and one with them:
    each is refused as it would be without a body, and the heartbeats go on (before: the
    answers were followed by inflating every bomb, and a heartbeat waited 2.7 s)."""
    gzipped = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    sends: list[tuple[str, str, dict[str, str], int]] = [
        ("POST", server.base + "/nothing", gzipped, 404),
        ("POST", server.base + "/healthz", gzipped, 405),
        ("POST", server.eureka + "apps/BOMB", gzipped, 401),
        ("POST", server.eureka + "apps/BOMB", gzipped | auth(CLIENT), 413),
    ]

    async def send(method: str, url: str, headers: dict[str, str], expected: int) -> None:
        async with server.session.request(method, url, data=BOMB, headers=headers) as response:
            body = await response.read()
        assert expected == response.status, body
        assert "error" in orjson.loads(body)

    before = await server.registry()
    _, longest = await server.probed(asyncio.gather(*(send(*s) for s in sends)))
    assert longest < PROBE_BOUND
    assert (
        before["applications"]["apps__hashcode"]
        == (await server.registry())["applications"]["apps__hashcode"]
    )
