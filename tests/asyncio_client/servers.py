"""Real registry processes for the client's tests, and what the tests ask them directly."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from tests.processes import ServerProcess, Servers

# How the copy is kept, and the server settings that leave the client only that way
MODES = {
    "watch": {},
    "long_poll": {"reads__watch": "false"},
    "delta": {"reads__watch": "false", "reads__long_poll": "false"},
}

Start = Callable[..., Awaitable[ServerProcess]]


@pytest.fixture
def start_node(servers: Servers) -> Start:
    """Starts `python -m registry serve` processes (no store unless asked, no fetch limit,
    the given settings as REGISTRY_* variables), once `ready` answers (None: at once); each
    is stopped at the end of the test."""

    async def start(
        port: int | None = None, *, ready: str | None = "/readyz", **settings: str
    ) -> ServerProcess:
        settings = {"store__enabled": "false", "limits__fetch_rate_limit": "0", **settings}
        return await servers.start(port, ready=ready, **settings)

    return start


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def status_of(session: aiohttp.ClientSession, url: str, method: str = "GET") -> int:
    """The status a request is answered with; 0 when no server answers."""
    try:
        async with session.request(method, url) as response:
            return response.status
    except aiohttp.ClientConnectionError:
        return 0


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> int:
    async with session.post(url, json=body) as response:
        return response.status
