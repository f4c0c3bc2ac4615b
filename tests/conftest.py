"""Fixtures: the real app on a fake clock, and blockbuster watching the event loop; the
container tests run last."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web_runner import BaseRunner
from blockbuster import BlockBuster, blockbuster_ctx

from registry import FakeClock, Settings, create_app
from registry.core.registry import Registry
from registry.serving import Runner
from registry.store.writer import StoreWriter
from tests import mutation
from tests.nodes import Nodes
from tests.processes import Servers

AiohttpClient = Callable[..., Awaitable[TestClient]]
CONTAINERS = Path(__file__).parent / "container"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The container tests last: building an image and tearing containers down loads the
    machine (disk and CPU) for a while after them, which the fault suite's timed probes that
    would otherwise come next must not measure. Under mutation testing, a mutant is judged by
    its module's own suites alone, and the clean run before by its group's (tests/mutation)."""
    items.sort(key=lambda item: item.path.is_relative_to(CONTAINERS))
    judged_by = mutation.judging(
        os.environ.get("MUTANT_UNDER_TEST", ""), os.environ.get(mutation.GROUP)
    )
    if judged_by is not None:
        root = config.rootpath
        suites = [root / suite for suite in judged_by]
        kept = [item for item in items if any(item.path.is_relative_to(s) for s in suites)]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


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
    """Servers in this process freeze the heap (registry/health/heap.py); give what they set aside
    back to the collector after each test, so one test's garbage is not kept for the run."""
    yield
    gc.unfreeze()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    return Settings()


class _ProductServer(TestServer):
    """aiohttp's test server, run by the product's own runner (`serving.Runner`): connections
    handled as in production (bodies inflated only by the handler that reads them, parser
    refusals answered in JSON)."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        return Runner(self.app, **kwargs)


@pytest.fixture
def aiohttp_client(aiohttp_client: AiohttpClient) -> AiohttpClient:
    """pytest-aiohttp's, serving an application as the product does (`_ProductServer`)."""

    async def client(app: web.Application | TestServer, **kwargs: object) -> TestClient:
        server = _ProductServer(app) if isinstance(app, web.Application) else app
        return await aiohttp_client(server, **kwargs)

    return client


@pytest.fixture(name="client")
async def _client(
    aiohttp_client: AiohttpClient, settings: Settings, clock: FakeClock
) -> TestClient:
    return await aiohttp_client(create_app(settings, clock=clock))


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Servers]:
    """Server processes a test starts (tests/processes.py), all killed when it ends."""
    pool = Servers(tmp_path)
    try:
        yield pool
    finally:
        await pool.kill_all()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Nodes]:
    """Cluster nodes a test starts (tests/nodes.py), all killed when it ends."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        pool = Nodes(session, tmp_path)
        try:
            yield pool
        finally:
            await pool.stop_all()


@pytest.fixture
async def writer(tmp_path: Path, registry: Registry) -> AsyncIterator[StoreWriter]:
    """A store writer on a real SQLite file, for the `registry` fixture of the test that asks."""
    writer = StoreWriter(tmp_path / "registry.db", registry, FakeClock(), busy_timeout_ms=50)
    assert await writer.open() is not None
    registry.subscribe(writer)
    yield writer
    await writer.close()
