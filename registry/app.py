"""Wiring: `create_app` builds the registry, its subscribers, routes and background tasks."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import structlog
from aiohttp import web

from peers.anti_entropy import anti_entropy_forever
from peers.cluster import Cluster
from peers.digest import Digests
from peers.startup_sync import sync_at_start
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
    RESTORED,
    SETTINGS,
    STARTED_AT,
    TALLIES,
    WRITER,
    ZONED,
)
from registry.checks.checker import Checker
from registry.codec import Format
from registry.common.clock import Clock, SystemClock
from registry.common.tasks import SLICE, Loops, Pacer
from registry.core.eviction import Evictor
from registry.core.preservation import SelfPreservation
from registry.core.quotas import CredentialQuotas
from registry.core.registry import Registry
from registry.health import heap
from registry.health.activity import Activity
from registry.health.loop_lag import LoopLag
from registry.health.memory import MemoryGuard, watermark
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
from registry.reads.feed import KEEPALIVE, ChangeFeed
from registry.reads.journal import DeltaJournal
from registry.reads.zoned import ZonedBlocks
from registry.settings import Settings
from registry.store.lock import lock_data_dir
from registry.store.restore import restore, restore_missing
from registry.store.sqlite import Snapshot
from registry.store.writer import InstanceKey, StoreWriter

__all__ = ["CACHE", "CLOCK", "JOURNAL", "REGISTRY", "SETTINGS", "create_app"]

log = structlog.get_logger()

HOUR = 3600.0
CATALOG_REFRESH = 1.0  # seconds between looks for encoded instances older than the max age
READ_FORMATS_INTERVAL = 10.0  # seconds between looks at which formats to remember for a restart


Reload = Callable[[], Settings]


def create_app(
    settings: Settings | None = None, *, clock: Clock | None = None, reload: Reload | None = None
) -> web.Application:
    """The server. `reload`, when given, re-reads the settings on SIGHUP (peers take effect)."""
    settings = settings or Settings()
    clock = clock or SystemClock()
    app = web.Application(client_max_size=settings.max_body_bytes)
    registry = Registry(
        legacy_lease_expiry=settings.legacy_lease_expiry,
        sync_when_timestamp_differs=settings.sync_when_timestamp_differs,
        removal_margin_ms=int(settings.removal_margin * 1000),
        tombstone_retention_ms=int(settings.tombstone_retention * 1000),
        max_clock_skew_ms=int(settings.max_clock_skew * 1000),
        max_applications=settings.max_applications,
        max_instances_per_application=settings.max_instances_per_application,
    )
    journal = DeltaJournal(retention_ms=int(settings.delta_retention * 1000))
    cache = ResponseCache(
        max_age=settings.response_cache_max_age, read_only=settings.use_read_only_response_cache
    )
    preservation = SelfPreservation(
        enabled=settings.self_preservation,
        percent=settings.renewal_percent_threshold,
        min_instances=settings.self_preservation_min_instances,
        recount_interval=settings.renewal_threshold_update_interval,
        accept_lasting_drop=settings.self_preservation_accept_lasting_drop,
        window=settings.renewal_window,
    )
    catalog = Catalog(registry, max_age=settings.response_cache_max_age)
    zoned = ZonedBlocks(registry, catalog, max_age=settings.response_cache_max_age)
    feed = ChangeFeed(registry, clock, journal, catalog)
    counts = InstanceCounts()
    cluster = Cluster(registry, clock, settings)
    digests = Digests(registry)
    quotas = (
        CredentialQuotas(per_credential=settings.max_instances_per_credential)
        if settings.max_instances_per_credential
        else None
    )
    checker = (
        Checker(registry, clock, settings, members=cluster.members)
        if settings.health_checks
        else None
    )
    # Who the registry tells, in this order (the store writer joins as the app starts: _store).
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
    app[SETTINGS] = settings
    app[CLOCK] = clock
    app[REGISTRY] = registry
    app[JOURNAL] = journal
    app[CACHE] = cache
    app[CATALOG] = catalog
    app[PRESERVATION] = preservation
    app[FEED] = feed
    app[WRITER] = None
    app[RESTORED] = 0
    app[METRICS] = collector_registry(app, counts)
    app[STARTED_AT] = clock.monotonic()
    app[LIFECYCLE] = Lifecycle()
    app[REQUESTS] = RequestStats()
    app[LOOP_LAG] = LoopLag()
    app[CONNECTIONS] = Connections(per_address=settings.max_connections_per_address)
    app[PAGES] = Recent(max_age=PAGE_MAX_AGE)
    app[TALLIES] = Tallies()
    app[ZONED] = zoned
    app[MEMORY] = MemoryGuard(0)  # its watermark is found as the app starts (_memory)
    app[QUOTAS] = quotas
    app[LIMITER] = (
        FetchLimiter(rate=settings.fetch_rate_limit, burst=settings.fetch_burst)
        if settings.fetch_rate_limit
        else None
    )
    app[CREDENTIALS] = Credentials(settings) if settings.secured else None
    app[CLUSTER] = cluster
    app[DIGESTS] = digests
    app[CHECKER] = checker
    add_routes(app)
    app.on_shutdown.append(_drain)
    app.cleanup_ctx.append(_stopped)  # first, so that it ends last
    app.cleanup_ctx.append(_store)  # the registry is restored before anything runs
    app.cleanup_ctx.append(_memory)
    app.cleanup_ctx.append(_override_expiry)
    app.cleanup_ctx.append(_evictor)
    app.cleanup_ctx.append(_journal_cleaner)
    app.cleanup_ctx.append(_keepalives)
    app.cleanup_ctx.append(_loop_lag)
    app.cleanup_ctx.append(_heap)
    app.cleanup_ctx.append(_activity)
    app.cleanup_ctx.append(_checks)
    app.cleanup_ctx.append(_peers(reload))
    return app


async def _keepalives(app: web.Application) -> AsyncIterator[None]:
    """The feed's beat: idle watch streams send a comment, so proxies keep them open."""
    feed = app[FEED]
    loops = Loops(app[CLOCK])
    loops.every(KEEPALIVE, feed.beat, name="keepalive")
    yield
    await loops.stop()


async def _checks(app: web.Application) -> AsyncIterator[None]:
    """Server-side health checks, for the instances that ask (registry/checks/)."""
    checker = app[CHECKER]
    if checker is None:
        _release_holds(app[REGISTRY], app[CLOCK].wall_ms())
        yield
        return
    await checker.find_own_addresses()  # refused as destinations before a check is asked
    loops = Loops(app[CLOCK])
    loops.start(checker.run, name="health_checks")
    yield
    await loops.stop()


def _release_holds(registry: Registry, now_ms: int) -> None:
    """Checks are off (health_checks = false): the holds a store or a peer kept would never be
    released, so they go, and each instance's own claim decides again."""
    for lease in list(registry.leases()):
        registry.let_go(lease.instance.app, lease.instance.instance_id, now_ms=now_ms)
    for iid, _ in registry.checks.items():  # of instances not here
        registry.checks.release(iid)


async def _activity(app: web.Application) -> AsyncIterator[None]:
    """One info line per interval summing up registrations, cancels, evictions, renewals;
    the last one at shutdown."""
    activity = Activity(app[REGISTRY])
    interval = app[SETTINGS].activity_log_interval
    loops = Loops(app[CLOCK])
    loops.every(interval, activity.log, name="activity")
    yield
    await loops.stop()
    activity.log()


async def _heap(app: web.Application) -> AsyncIterator[None]:
    """Set the long-lived registry aside from full garbage collections (registry/health/heap.py):
    once restored, then every `gc_freeze_interval`."""
    interval = app[SETTINGS].gc_freeze_interval
    if not interval:
        yield
        return
    heap.freeze()
    loops = Loops(app[CLOCK])
    loops.every(interval, heap.freeze, name="gc_freeze")
    yield
    await loops.stop()


async def _loop_lag(app: web.Application) -> AsyncIterator[None]:
    """Watch how late the event loop runs, for /metrics."""
    app[LOOP_LAG].start()
    yield
    app[LOOP_LAG].stop()


async def _drain(app: web.Application) -> None:
    """The server is shutting down: DRAINING (long-polls and watch streams are ended then, so
    they do not hold the shutdown up)."""
    app[LIFECYCLE].move(Phase.DRAINING, "shutting down")


async def _stopped(app: web.Application) -> AsyncIterator[None]:
    """Watches end when draining starts; STOPPED once everything else has stopped."""
    lifecycle = app[LIFECYCLE]
    lifecycle.on_enter(Phase.DRAINING, app[FEED].close)
    yield
    if lifecycle.phase is not Phase.DRAINING:  # a start that failed or was stopped drains too
        lifecycle.move(Phase.DRAINING, f"stopped while {lifecycle.phase.value}: {lifecycle.reason}")
    lifecycle.move(Phase.STOPPED, "stopped")


def _peers(reload: Reload | None) -> Callable[[web.Application], AsyncIterator[None]]:
    async def peers(app: web.Application) -> AsyncIterator[None]:
        """Replication, start-up sync and anti-entropy; peers from DNS, looked up again and
        again; SIGHUP reloads the peer list."""
        cluster, settings, clock = app[CLUSTER], app[SETTINGS], app[CLOCK]
        registry, lifecycle = app[REGISTRY], app[LIFECYCLE]
        peer_dns = None
        if settings.peer_dns:
            # Imported only when used: dnspython takes 30 ms to import, which every start
            # of a node without peer_dns would pay.
            from peers.peer_dns import PeerDns, refresh

            peer_dns = PeerDns(settings)
        try:
            await cluster.start()
            if peer_dns is not None:  # the first lookup decides whether to sync from peers
                await refresh(peer_dns, cluster)
        except BaseException:  # a start stopped here: its session is closed again
            await cluster.aclose()
            raise
        if app[RESTORED]:
            # Restored state is served at once, and brought level with the peers at once:
            # what they removed or changed while this node was down (peers/anti_entropy.py).
            cluster.returned.set()
        loops = Loops(clock)
        loops.start(
            lambda: anti_entropy_forever(
                cluster.clients,
                registry,
                app[DIGESTS],
                clock,
                lifecycle,
                interval=settings.anti_entropy_interval,
                retry=settings.peer_probe_interval,
                soon=cluster.returned,
            ),
            name="anti_entropy",
        )
        if peer_dns is not None:
            loops.every(
                settings.peer_dns_interval, lambda: refresh(peer_dns, cluster), name="peer_dns"
            )
        dns = cluster.membership.dns
        # Peers to copy from, or DNS that has not told yet whether there are any.
        peers_expected = cluster.dispatchers or (dns is not None and not dns.answered)
        if peers_expected and not app[RESTORED]:  # restored state is served at once
            lifecycle.move(Phase.SYNCING, "copying the registry from peers")
            loops.start(
                lambda: sync_at_start(
                    cluster.clients,
                    registry,
                    clock,
                    lifecycle,
                    budget=settings.peer_sync_budget,
                    empty_window=settings.peer_sync_empty_window,
                    peers_unknown=lambda: _dns_silent(cluster),
                ),
                name="peer_sync",
            )
        elif _store_lost(app) and not settings.serve_empty_store:
            window = settings.peer_sync_empty_window
            lifecycle.move(
                Phase.SYNCING,
                f"the store could not be restored ({_store_lost(app)}) and there is no peer to "
                f"copy: reads open in {window:g} s, once clients have registered again (their "
                "heartbeats are answered 404 meanwhile), or at once with serve_empty_store",
            )
            loops.start(
                lambda: _open_reads_after(clock, lifecycle, window), name="empty_store_window"
            )
        else:
            lifecycle.move(Phase.SERVING, lifecycle.reason if app[RESTORED] else "serving")
        if reload is not None:
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGHUP, lambda: loops.start(lambda: _reload(app, reload), name="reload")
            )
        yield
        if reload is not None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await loops.stop()
        await cluster.aclose()

    return peers


def _dns_silent(cluster: Cluster) -> str:
    """Why peers may be missing from the list yet: DNS never answered ("" once it has)."""
    dns = cluster.membership.dns
    if dns is None or dns.answered:
        return ""
    return f"peer_dns has not answered yet ({dns.last_error})"


def _store_lost(app: web.Application) -> str:
    """Why the store held nothing to restore though one is configured ("" if it did or may
    have: a new store, or no store)."""
    writer = app[WRITER]
    if writer is None:
        return ""
    if writer.moved_aside is not None:
        return f"it was corrupt, and is kept aside at {writer.moved_aside.path}"
    if writer.degraded:
        return f"it cannot be opened: {writer.last_error}"
    return ""


async def _open_reads_after(clock: Clock, lifecycle: Lifecycle, window: float) -> None:
    await clock.sleep(window)
    lifecycle.synced(f"served empty after {window:g} s: the store could not be restored")


async def _reload(app: web.Application, reload: Reload) -> None:
    """SIGHUP: the settings file read again; the peer list and the credentials take effect."""
    try:
        settings = await asyncio.to_thread(reload)
    except Exception as exc:  # a bad edit must not take the node down: keep the old settings
        log.error("settings_reload_failed", detail=str(exc))
        return
    cluster = app[CLUSTER]
    cluster.set_peers(settings.peers)
    if _peer_dns_settings(settings) != _peer_dns_settings(app[SETTINGS]):
        log.warning("peer_dns_not_reloaded", reason="peer_dns settings take a restart")
    credentials = _reload_credentials(app[CREDENTIALS], settings)
    log.info("settings_reloaded", peers=list(cluster.dispatchers), credentials=credentials)


def _peer_dns_settings(settings: Settings) -> tuple[object, ...]:
    return tuple(getattr(settings, f) for f in Settings.__dataclass_fields__ if "peer_dns" in f)


def _reload_credentials(current: Credentials | None, settings: Settings) -> str:
    """Take the reloaded credentials; what was done ("applied", "none", or "kept" with a
    warning saying why)."""
    if current is None and settings.secured:
        log.warning(
            "credentials_not_reloaded",
            reason="this node started without credentials, so none of its routes is guarded: "
            "restart it to turn them on",
        )
        return "kept"
    if current is None:
        return "none"
    if not settings.secured:
        log.warning(
            "credentials_not_reloaded",
            reason="removing every credential would open every plane to anyone: restart the "
            "node to turn them off",
        )
        return "kept"
    current.update(settings)
    return "applied"


async def _store(app: web.Application) -> AsyncIterator[None]:
    """Restore the registry from the store, then write its changes behind until shutdown."""
    settings, clock, registry, catalog = app[SETTINGS], app[CLOCK], app[REGISTRY], app[CATALOG]
    if not settings.store:
        yield
        return

    def late_restore(snapshot: Snapshot, removed: set[InstanceKey], gone: set[str]) -> None:
        restore_missing(registry, snapshot, removed, gone, now_ms=clock.wall_ms())
        app[LIFECYCLE].synced("the store opened late, and what it kept is restored")

    # One process per data directory (registry/store/lock.py), for as long as it runs.
    held = await asyncio.to_thread(lock_data_dir, Path(settings.data_dir))
    try:
        writer = app[WRITER] = StoreWriter(
            Path(settings.data_dir) / "registry.db",
            registry,
            clock,
            late_restore=late_restore,
            busy_timeout_ms=int(settings.store_busy_timeout * 1000),
            refuse_corrupt=settings.refuse_corrupt_store,
        )
        # Before the restore, which tells of overrides the store's table lacks (see Registry.load).
        registry.subscribe(writer)
        # Before serving: nothing else allocates meanwhile.
        app[LIFECYCLE].move(Phase.RESTORING, f"reading {writer.path}")
        with heap.collections_paused(then_freeze=settings.gc_freeze_interval > 0):
            snapshot = await writer.open()  # None: unavailable; degraded until a flush opens it
            if snapshot is not None:
                app[RESTORED] = restore(registry, app[JOURNAL], snapshot, now_ms=clock.wall_ms())
                app[LIFECYCLE].move(
                    Phase.RESTORING, f"restored {app[RESTORED]} instances from {writer.path}"
                )
                formats = [fmt for fmt in Format if fmt.value in snapshot.read_formats]
                catalog.expect_reads(formats, now=clock.monotonic())
        retention_ms = int(settings.override_history_retention * 1000)
        tombstone_retention_ms = int(settings.tombstone_retention * 1000)

        async def forget_old_history() -> None:
            await writer.forget_history(before_ms=clock.wall_ms() - retention_ms)
            await writer.forget_tombstones(before_ms=clock.wall_ms() - tombstone_retention_ms)

        remembered: list[Format] = []

        async def remember_read_formats() -> None:
            nonlocal remembered
            formats = catalog.read_formats(now=clock.monotonic())
            if formats != remembered:
                await writer.remember_read_formats(fmt.value for fmt in formats)
                remembered = formats

        loops = Loops(clock)
        loops.every(settings.store_flush_interval, writer.flush_logged, name="store_flush")
        loops.every(HOUR, forget_old_history, name="override_history")
        loops.every(READ_FORMATS_INTERVAL, remember_read_formats, name="read_formats")
        yield
        await loops.stop()
        await writer.close()  # what is owed is written first
    finally:
        os.close(held)


async def _memory(app: web.Application) -> AsyncIterator[None]:
    """The resident memory read every second, for the watermark (registry/health/memory.py)."""
    guard = app[MEMORY]
    guard.watermark = await asyncio.to_thread(watermark, app[SETTINGS].memory_watermark_mb)
    if not guard.watermark:
        yield
        return
    loops = Loops(app[CLOCK])
    loops.every(1.0, lambda: asyncio.to_thread(guard.sample), name="memory")
    yield
    await loops.stop()


async def _override_expiry(app: web.Application) -> AsyncIterator[None]:
    """Every second, the core removes the overrides whose expiry has come, as an admin's
    DELETE would (status UNKNOWN)."""
    clock, registry = app[CLOCK], app[REGISTRY]
    loops = Loops(clock)
    loops.every(1.0, lambda: registry.expire_due(now_ms=clock.wall_ms()), name="override_expiry")
    yield
    await loops.stop()


async def _evictor(app: web.Application) -> AsyncIterator[None]:
    """Eviction sweeps, and the renewal counting self-preservation judges them by."""
    clock, settings = app[CLOCK], app[SETTINGS]
    evictor = Evictor(
        app[REGISTRY],
        clock,
        app[PRESERVATION],
        interval=settings.eviction_interval,
        max_fraction=settings.eviction_max_fraction,
    )
    loops = Loops(clock)
    loops.every(settings.eviction_interval, evictor.sweep, name="eviction")
    loops.every(settings.renewal_window, evictor.end_window, name="renewal_count")
    yield
    await loops.stop()


async def _journal_cleaner(app: web.Application) -> AsyncIterator[None]:
    """Forgets changes and removals older than their retention; encodes again what is older
    than the cache's maximum age, and what changes dropped in the formats being read; refreshes
    the read-only cache layer when it is on."""
    clock, journal, cache, catalog = app[CLOCK], app[JOURNAL], app[CACHE], app[CATALOG]

    registry = app[REGISTRY]

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

    settings = app[SETTINGS]
    loops = Loops(clock)
    loops.every(settings.delta_cleanup_interval, clean, name="journal_cleanup")
    loops.every(CATALOG_REFRESH, refresh, name="catalog_refresh")
    if settings.use_read_only_response_cache:
        loops.every(
            settings.response_cache_update_interval,
            lambda: cache.refresh(clock.monotonic()),
            name="cache_refresh",
        )
    yield
    await loops.stop()
