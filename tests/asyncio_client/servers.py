"""Real registry processes for the client's tests, and what the tests ask them directly."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import ROOT, free_port, registry_env, until_ready

# How the copy is kept, and the server settings that leave the client only that way
MODES = {
    "watch": {},
    "long_poll": {"watch": "false"},
    "delta": {"watch": "false", "long_poll": "false"},
}


@dataclass
class Node:
    port: int
    process: asyncio.subprocess.Process

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def eureka(self) -> str:
        return f"{self.base}/eureka/"


Start = Callable[..., Awaitable[Node]]


@pytest.fixture
async def start_node(tmp_path: Path) -> AsyncIterator[Start]:
    """Starts `python -m registry serve` processes (no store unless asked, no fetch limit,
    the given settings as REGISTRY_* variables); each is stopped at the end of the test."""
    nodes: list[Node] = []

    async def start(port: int | None = None, **settings: str) -> Node:
        port = port or free_port()
        env = registry_env({"store": "false", "fetch_rate_limit": "0"} | settings)
        log = await asyncio.to_thread((tmp_path / f"server-{port}.log").open, "ab")
        with log:
            process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "registry", "serve", "--port", str(port)),
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
        nodes.append(Node(port, process))
        return nodes[-1]

    yield start
    for node in nodes:
        if node.process.returncode is None:
            node.process.terminate()
            await asyncio.wait_for(node.process.wait(), 20)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def ready(session: aiohttp.ClientSession, node: Node) -> Node:
    await until_ready(session, node.base)
    return node


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
