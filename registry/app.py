"""Wiring: `create_app` builds the registry, its subscribers, routes and background tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from registry.appkeys import CACHE, CLOCK, JOURNAL, REGISTRY, SETTINGS, STARTED_AT
from registry.cache import ResponseCache
from registry.clock import Clock, SystemClock
from registry.core import Registry
from registry.eviction import Evictor
from registry.http import add_routes
from registry.journal import DeltaJournal
from registry.settings import Settings
from registry.tasks import cancel_and_wait, run_every

__all__ = ["CACHE", "CLOCK", "JOURNAL", "REGISTRY", "SETTINGS", "create_app"]

log = structlog.get_logger()


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> web.Application:
    settings = settings or Settings()
    clock = clock or SystemClock()
    app = web.Application(client_max_size=settings.max_body_bytes)
    registry = Registry(
        legacy_lease_expiry=settings.legacy_lease_expiry,
        sync_when_timestamp_differs=settings.sync_when_timestamp_differs,
    )
    journal = DeltaJournal(retention_ms=int(settings.delta_retention * 1000))
    cache = ResponseCache(max_age=settings.response_cache_max_age)
    registry.subscribe(journal.record)
    registry.subscribe(cache.invalidate)
    app[SETTINGS] = settings
    app[CLOCK] = clock
    app[REGISTRY] = registry
    app[JOURNAL] = journal
    app[CACHE] = cache
    app[STARTED_AT] = clock.monotonic()
    add_routes(app)
    app.cleanup_ctx.append(_evictor)
    app.cleanup_ctx.append(_journal_cleaner)
    return app


async def _evictor(app: web.Application) -> AsyncIterator[None]:
    clock, interval = app[CLOCK], app[SETTINGS].eviction_interval
    evictor = Evictor(app[REGISTRY], clock, interval=interval)
    task = asyncio.create_task(run_every(clock, interval, evictor.tick, name="eviction"))
    yield
    await cancel_and_wait(task)


async def _journal_cleaner(app: web.Application) -> AsyncIterator[None]:
    clock, journal, cache = app[CLOCK], app[JOURNAL], app[CACHE]

    def clean() -> None:
        if journal.purge(now_ms=clock.wall_ms()):
            cache.drop_delta()

    task = asyncio.create_task(
        run_every(clock, app[SETTINGS].delta_cleanup_interval, clean, name="journal_cleanup")
    )
    yield
    await cancel_and_wait(task)
