"""Fixtures: the real app on a fake clock, and blockbuster watching the event loop."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from blockbuster import BlockBuster, blockbuster_ctx

from registry import FakeClock, Settings, create_app
from tests.nodes import Nodes

AiohttpClient = Callable[[web.Application], Awaitable[TestClient]]


@pytest.fixture(autouse=True)
def blockbuster() -> Iterator[BlockBuster]:
    """Fail any test whose code blocks the event loop."""
    with blockbuster_ctx() as bb:
        yield bb


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in a directory of its own, so every server's `./data` store is its own."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def thawed_heap() -> Iterator[None]:
    """Servers in this process freeze the heap (registry/heap.py); give what they set aside
    back to the collector after each test, so one test's garbage is not kept for the run."""
    yield
    gc.unfreeze()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture(name="client")
async def _client(
    aiohttp_client: AiohttpClient, settings: Settings, clock: FakeClock
) -> TestClient:
    return await aiohttp_client(create_app(settings, clock=clock))


@pytest.fixture
async def nodes() -> AsyncIterator[Nodes]:
    """Server processes a test starts (tests/nodes.py), all killed when it ends."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        pool = Nodes(session)
        try:
            yield pool
        finally:
            await pool.stop_all()
