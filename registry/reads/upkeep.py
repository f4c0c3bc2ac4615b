"""The read side's upkeep while the server runs: what is kept for reads stays fresh and small.

Changes and removals older than their retention are forgotten (the delta journal, tombstones,
the notes of removed overrides); encoded instances older than the cache's maximum age, and those
a change dropped in the formats being read, are encoded again (catalog.py); and the read-only
cache layer is refreshed when it is on (cache.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from registry.common.clock import Clock
from registry.common.tasks import SLICE, Loops, Pacer
from registry.core.registry import Registry
from registry.reads.cache import ResponseCache
from registry.reads.catalog import Catalog
from registry.reads.journal import DeltaJournal

CATALOG_REFRESH = 1.0  # seconds between looks for encoded instances older than the max age


async def upkeep(
    clock: Clock,
    registry: Registry,
    journal: DeltaJournal,
    cache: ResponseCache,
    catalog: Catalog,
    *,
    cleanup_interval: float,
    read_only_refresh: float | None,
) -> AsyncIterator[None]:
    """Forget every `cleanup_interval`, encode again every CATALOG_REFRESH, and refresh the
    read-only layer every `read_only_refresh` seconds (None: it is off)."""

    async def clean() -> None:
        now_ms, pacer = clock.wall_ms(), Pacer()
        if await journal.expire(now_ms=now_ms, pacer=pacer):
            cache.drop_delta()
        while registry.tombstones.purge(now_ms=now_ms, limit=SLICE):
            await pacer.pace()
        registry.overrides.notes.purge_removals(before_ms=now_ms - registry.tombstones.retention_ms)

    async def refresh() -> None:
        await catalog.refresh(
            now=clock.monotonic(),
            refreshed=cache.drop_application,
            pacer=Pacer(),
            every=CATALOG_REFRESH,
        )
        await catalog.keep_warm(now=clock.monotonic(), pacer=Pacer())

    async with Loops(clock) as loops:
        loops.every(cleanup_interval, clean, name="journal_cleanup")
        loops.every(CATALOG_REFRESH, refresh, name="catalog_refresh")
        if read_only_refresh is not None:
            loops.every(
                read_only_refresh, lambda: cache.refresh(clock.monotonic()), name="cache_refresh"
            )
        yield
