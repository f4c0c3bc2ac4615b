"""Wiring: `create_app` builds the registry and its parts, says who listens to it, adds the
routes, and lists what runs in the background, each part's run living with the part."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web

from peers.cluster import Cluster
from peers.digest import Digests
from peers.joining import joined
from registry.appkeys import (
    CACHE,
    CATALOG,
    CHECKER,
    CLOCK,
    CLUSTER,
    CONNECTIONS,
    CREDENTIALS,
    DIGESTS,
    FEED,
    JOURNAL,
    LIFECYCLE,
    LIMITER,
    LOOP_LAG,
    MEMORY,
    METRICS,
    PAGES,
    PRESERVATION,
    QUOTAS,
    REGISTRY,
    REQUESTS,
    SETTINGS,
    STARTED_AT,
    TALLIES,
    WRITER,
    ZONED,
)
from registry.checks.checker import Checker, released
from registry.common.clock import Clock, SystemClock
from registry.core.eviction import Evictor
from registry.core.preservation import SelfPreservation
from registry.core.quotas import CredentialQuotas
from registry.core.registry import Registry
from registry.health import heap
from registry.health.activity import Activity
from registry.health.loop_lag import LoopLag
from registry.health.memory import MemoryGuard
from registry.health.request_stats import RequestStats
from registry.http.connections import Connections
from registry.http.credentials import Credentials
from registry.http.metrics_api import InstanceCounts, collector_registry
from registry.http.page_view import Tallies
from registry.http.ratelimit import FetchLimiter
from registry.http.routes import add_routes
from registry.http.status_page import PAGE_MAX_AGE
from registry.lifecycle import Lifecycle, Phase
from registry.reads.cache import Recent, ResponseCache
from registry.reads.catalog import Catalog
from registry.reads.feed import ChangeFeed
from registry.reads.journal import DeltaJournal
from registry.reads.upkeep import upkeep
from registry.reads.zoned import ZonedBlocks
from registry.reload import Reload, on_sighup
from registry.settings import Settings
from registry.store.keeping import StoreKeeping

__all__ = ["CACHE", "CLOCK", "JOURNAL", "REGISTRY", "SETTINGS", "create_app"]

Running = Callable[[], AsyncIterator[None]]  # a part's run: set up, yield while serving, stop


def create_app(
    settings: Settings | None = None, *, clock: Clock | None = None, reload: Reload | None = None
) -> web.Application:
    """The server. `reload`, when given, re-reads the settings on SIGHUP (peers take effect)."""
    settings = settings or Settings()
    clock = clock or SystemClock()
    app = web.Application(client_max_size=settings.limits.max_body_bytes)
    registry = Registry(
        legacy_lease_expiry=settings.leases.legacy_expiry,
        sync_when_timestamp_differs=settings.leases.sync_when_timestamp_differs,
        removal_margin_ms=int(settings.leases.removal_margin * 1000),
        tombstone_retention_ms=int(settings.leases.tombstone_retention * 1000),
        max_clock_skew_ms=int(settings.leases.max_clock_skew * 1000),
        max_applications=settings.limits.max_applications,
        max_instances_per_application=settings.limits.max_instances_per_application,
    )
    journal = DeltaJournal(retention_ms=int(settings.reads.delta_retention * 1000))
    cache = ResponseCache(
        max_age=settings.reads.response_cache_max_age,
        read_only=settings.reads.use_read_only_response_cache,
    )
    preservation = SelfPreservation(
        enabled=settings.self_preservation.enabled,
        percent=settings.self_preservation.renewal_percent_threshold,
        min_instances=settings.self_preservation.min_instances,
        recount_interval=settings.self_preservation.renewal_threshold_update_interval,
        accept_lasting_drop=settings.self_preservation.accept_lasting_drop,
        window=settings.self_preservation.renewal_window,
    )
    catalog = Catalog(registry, max_age=settings.reads.response_cache_max_age)
    zoned = ZonedBlocks(registry, catalog, max_age=settings.reads.response_cache_max_age)
    feed = ChangeFeed(registry, clock, journal, catalog)
    counts = InstanceCounts()
    cluster = Cluster(registry, clock, settings)
    digests = Digests(registry)
    quotas = (
        CredentialQuotas(per_credential=settings.limits.max_instances_per_credential)
        if settings.limits.max_instances_per_credential
        else None
    )
    checker = (
        Checker(registry, clock, settings, members=cluster.members)
        if settings.checks.enabled
        else None
    )
    # Who the registry tells, in this order (the store's writer joins as the app starts).
    parts = (
        journal,
        catalog,
        zoned,
        cache,
        feed,
        counts,
        digests,
        quotas,
        checker,
        cluster,
    )
    for part in parts:
        if part is not None:
            registry.subscribe(part)
    lifecycle = Lifecycle()
    keeping = (
        StoreKeeping(settings, clock, registry, journal, catalog, lifecycle)
        if settings.store.enabled
        else None
    )
    credentials = Credentials(settings) if settings.secured else None
    memory = MemoryGuard(0)  # its watermark is found as the app starts
    loop_lag = LoopLag()
    evictor = Evictor(
        registry,
        clock,
        preservation,
        interval=settings.leases.eviction_interval,
        max_fraction=settings.leases.eviction_max_fraction,
    )

    app[SETTINGS] = settings
    app[CLOCK] = clock
    app[REGISTRY] = registry
    app[JOURNAL] = journal
    app[CACHE] = cache
    app[CATALOG] = catalog
    app[PRESERVATION] = preservation
    app[FEED] = feed
    app[WRITER] = keeping.writer if keeping else None
    app[METRICS] = collector_registry(app, counts)
    app[STARTED_AT] = clock.monotonic()
    app[LIFECYCLE] = lifecycle
    app[REQUESTS] = RequestStats()
    app[LOOP_LAG] = loop_lag
    app[CONNECTIONS] = Connections(per_address=settings.limits.max_connections_per_address)
    app[PAGES] = Recent(max_age=PAGE_MAX_AGE)
    app[TALLIES] = Tallies()
    app[ZONED] = zoned
    app[MEMORY] = memory
    app[QUOTAS] = quotas
    app[LIMITER] = (
        FetchLimiter(rate=settings.limits.fetch_rate_limit, burst=settings.limits.fetch_burst)
        if settings.limits.fetch_rate_limit
        else None
    )
    app[CREDENTIALS] = credentials
    app[CLUSTER] = cluster
    app[DIGESTS] = digests
    app[CHECKER] = checker
    add_routes(app)

    # Draining ends the watch streams and long-polls, so that they do not hold the shutdown up.
    lifecycle.on_enter(Phase.DRAINING, feed.close)
    app.on_shutdown.append(lambda _: lifecycle.drain())
    # What runs beside the requests: started in this order, stopped in the reverse one.
    running: list[Running | None] = [
        lifecycle.running,  # first, so that it ends last (STOPPED)
        keeping.running if keeping else None,  # the registry is restored before anything runs
        lambda: memory.running(clock, settings.limits.memory_watermark_mb),
        lambda: registry.expiring(clock),  # overrides past their expiry
        evictor.running,  # and the renewal counts self-preservation judges it by
        lambda: upkeep(
            clock,
            registry,
            journal,
            cache,
            catalog,
            cleanup_interval=settings.reads.delta_cleanup_interval,
            read_only_refresh=(
                settings.reads.response_cache_update_interval
                if settings.reads.use_read_only_response_cache
                else None
            ),
        ),
        feed.beating,  # keepalives of idle watch streams
        loop_lag.running,
        lambda: heap.freezing(clock, settings.server.gc_freeze_interval),
        lambda: Activity(registry).running(clock, settings.logging.activity_interval),
        checker.running if checker else lambda: released(registry, clock),
        lambda: joined(
            cluster,
            registry,
            digests,
            clock,
            lifecycle,
            settings,
            restored=lambda: keeping.restored if keeping else 0,
            store_lost=keeping.lost if keeping else str,
        ),
        (lambda: on_sighup(reload, settings, clock, cluster, credentials)) if reload else None,
    ]
    for run in running:
        if run is not None:
            app.cleanup_ctx.append(_context(run))
    return app


def _context(run: Running) -> Callable[[web.Application], AsyncIterator[None]]:
    """A part's run as aiohttp's cleanup context (which passes the app, which parts need not)."""
    return lambda _app: run()
