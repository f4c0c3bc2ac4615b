"""Fixtures shared by the registry's tests: a store writer on a real SQLite file, for the
`registry` fixture of the test module that asks for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from registry import FakeClock
from registry.core import Registry
from registry.store.writer import StoreWriter


@pytest.fixture
async def writer(tmp_path: Path, registry: Registry) -> AsyncIterator[StoreWriter]:
    writer = StoreWriter(tmp_path / "registry.db", registry, FakeClock(), busy_timeout_ms=50)
    assert await writer.open() is not None
    registry.subscribe(writer.on_change, overrides=writer.on_override)
    yield writer
    await writer.close()
