"""The checks' targets: a service's health endpoint on loopback that answers as told."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from registry import FakeClock
from tests.helpers import instance_doc
from tests.peers.apps import AiohttpServer


class Target:
    """A service's health endpoint that answers `status`."""

    def __init__(self) -> None:
        self.status = 200
        self.calls = 0

    async def health(self, request: web.Request) -> web.Response:
        self.calls += 1
        return web.Response(status=self.status, text="ok" if self.status == 200 else "failing")


@pytest.fixture
async def target(aiohttp_server: AiohttpServer) -> tuple[Target, TestServer]:
    service = Target()
    app = web.Application()
    app.router.add_get("/health", service.health)
    return service, await aiohttp_server(app, host="127.0.0.1")


class Port:
    """A TCP port that accepts connections (and closes them) while open, counting them."""

    def __init__(self) -> None:
        self.accepted = 0
        self.number = 0
        self._server: asyncio.Server | None = None

    async def open(self) -> Port:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.number)
        self.number = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        writer.close()


@pytest.fixture
async def port() -> AsyncIterator[Port]:
    opened = await Port().open()
    yield opened
    await opened.close()


async def run_checks(clock: FakeClock, seconds: float) -> None:
    """Move the clock `seconds` in steps, letting the checks' real round trips complete."""
    for _ in range(int(seconds * 10)):
        await clock.advance(0.1)
        await asyncio.sleep(0.01)


async def checks_until(clock: FakeClock, done: Callable[[], bool], seconds: float = 30) -> None:
    """Move the clock in steps until `done()` (checks are real round trips: on a busy machine
    one may take more than a step)."""
    for _ in range(int(seconds * 10)):
        if done():
            return
        await clock.advance(0.1)
        await asyncio.sleep(0.01)
    raise AssertionError("the checks did not get there")


def served_at(iid: str, port: int, **metadata: str) -> dict[str, Any]:
    """An ORDERS instance on loopback at `port`, its healthCheckUrl there: a target's."""
    return instance_doc(
        "ORDERS",
        iid,
        ipAddr="127.0.0.1",
        port={"$": port, "@enabled": "true"},
        healthCheckUrl=f"http://127.0.0.1:{port}/health",
        metadata=metadata,
    )
