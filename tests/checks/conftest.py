"""The checks' targets: a service's health endpoint on loopback that answers as told."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

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
