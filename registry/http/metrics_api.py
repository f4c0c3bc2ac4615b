"""GET /metrics: the registry in Prometheus' text format, through prometheus-client.

Everything is read when Prometheus scrapes, from counters the parts keep anyway. Two tallies are
kept for metrics alone: the instance count per application and status, updated from change
events (O(1) each) so a scrape never walks the registry, and the requests by endpoint, method
and status with their latencies (registry/health/request_stats.py, well under a microsecond each).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Mapping
from operator import attrgetter

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from registry.appkeys import (
    CACHE,
    CHECKER,
    CLUSTER,
    CONNECTIONS,
    FEED,
    JOURNAL,
    LIMITER,
    LOOP_LAG,
    MEMORY,
    METRICS,
    PAGES,
    PRESERVATION,
    REGISTRY,
    REQUESTS,
    WRITER,
)
from registry.checks.checker import SKIP_REASONS
from registry.common.tasks import SLICE, Pacer
from registry.core.model import ActionType, ChangeEvent
from registry.core.registry import Registry
from registry.core.subscriber import Loaded, Subscriber
from registry.core.zones import zone_of
from registry.reads.watchers import REASONS

_APP_AND_STATUS = attrgetter("instance.app", "instance.status")
MAX_ZONES = 64  # zones with a series of their own
COUNTED_AT_ONCE = 10_000  # instances whose zones a bulk load counts at once (7 ms)
OTHER_ZONES = "(other zones)"


class InstanceCounts(Subscriber):
    """Registered instances by (application, status) and by zone (core/zones.py; "" for
    none), kept up to date by change events.

    A zone costs a lookup in each instance's metadata (70 ms for 100 000): after a large bulk
    load (a warm restart) the zones are counted in slices, off the start-up and off any
    scrape, from a snapshot, and what changed meanwhile is added when the count ends."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._zones: Counter[str] | None = Counter()  # None: being counted, or to be
        self._meanwhile: list[tuple[str, int]] | None = None  # changes during a count
        self._loads = 0  # bulk loads so far: a count from before the last is dropped
        self._counting: asyncio.Task[None] | None = None

    def on_change(self, event: ChangeEvent) -> None:
        instance, previous = event.lease.instance, event.previous
        if previous is not None:
            self.counts[(previous.app, previous.status.value)] -= 1
            self._zone_step(zone_of(previous) or "", -1)
        if event.action is not ActionType.DELETED:
            self.counts[(instance.app, instance.status.value)] += 1
            self._zone_step(zone_of(instance) or "", +1)

    def _zone_step(self, zone: str, step: int) -> None:
        zones = self._zones
        if zones is not None:
            zones[zone] += step
            if not zones[zone]:
                del zones[zone]
        elif self._meanwhile is not None:
            self._meanwhile.append((zone, step))

    def on_load(self, registry: Loaded) -> None:
        """Count what the registry holds after a bulk load."""
        # Counted by (app, status) members first, in C: a warm restart loads 100 000.
        counts = Counter(map(_APP_AND_STATUS, registry.leases()))
        self.counts = Counter({(app, status.value): n for (app, status), n in counts.items()})
        self._loads += 1
        self._meanwhile = None
        self._zones = None
        if len(registry) <= COUNTED_AT_ONCE:
            self._zones = Counter(zone_of(lease.instance) or "" for lease in registry.leases())

    def zones(self, registry: Registry) -> Counter[str] | None:
        """Instances by zone; None while they are counted (a count is started if none is)."""
        if self._zones is None and self._counting is None:
            self._counting = asyncio.get_running_loop().create_task(self._count(registry))
        return self._zones

    async def _count(self, registry: Registry) -> None:
        try:
            loads, self._meanwhile = self._loads, []
            instances = [lease.instance for lease in registry.leases()]
            counted: Counter[str] = Counter()
            pacer = Pacer()
            for start in range(0, len(instances), SLICE):
                counted.update(zone_of(i) or "" for i in instances[start : start + SLICE])
                await pacer.pace()
            if loads == self._loads and self._meanwhile is not None:
                for zone, step in self._meanwhile:
                    counted[zone] += step
                self._zones = +counted  # zones left with none dropped
        finally:
            self._meanwhile = None
            self._counting = None


class RegistryCollector(Collector):
    def __init__(self, app: web.Application, counts: InstanceCounts) -> None:
        self._app = app
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        app = self._app
        registry, preservation = app[REGISTRY], app[PRESERVATION]
        instances = GaugeMetricFamily(
            "registry_instances", "Registered instances", labels=["app", "status"]
        )
        for (name, status), count in sorted(self._counts.counts.items()):
            if count:
                instances.add_metric([name, status], count)
        yield instances
        zones = GaugeMetricFamily(
            "registry_instances_by_zone",
            "Registered instances by zone (metadata zone, or Amazon's availability-zone)",
            labels=["zone"],
        )
        # Zones come from clients' metadata: the largest MAX_ZONES, the rest summed, so that a
        # client making names up cannot grow the scrape without bound.
        by_zone: Mapping[str, int] = self._counts.zones(registry) or {}  # none while counted
        counted = sorted(((n, zone) for zone, n in by_zone.items() if n), reverse=True)
        for count, zone in sorted(counted[:MAX_ZONES], key=lambda c: c[1]):
            zones.add_metric([zone], count)
        if len(counted) > MAX_ZONES:
            zones.add_metric([OTHER_ZONES], sum(n for n, _ in counted[MAX_ZONES:]))
        yield zones
        yield _counter("registry_registrations", "Registrations", registry.registrations)
        yield _counter("registry_cancels", "Cancels", registry.cancels)
        yield _counter("registry_evictions", "Leases evicted", registry.evictions)
        yield _counter("registry_renewals", "Heartbeats accepted", registry.renewals)
        yield _gauge("registry_index", "The registry index", registry.index)
        yield _gauge(
            "registry_journal_changes", "Changes the delta journal holds", len(app[JOURNAL])
        )
        renews = preservation.renewals_last_minute
        yield _gauge(
            "registry_renews_last_minute",
            "Renewals counted in the last complete window (each lease's up to one more than it"
            " weighs)",
            -1 if renews is None else renews,
        )
        yield _gauge(
            "registry_renews_threshold", "Self-preservation's threshold", preservation.threshold()
        )
        yield _gauge(
            "registry_expected_clients",
            "Self-preservation's expected clients",
            preservation.expected_clients(),
        )
        yield _gauge(
            "registry_expired_leases_held",
            "Expired leases self-preservation keeps (as of the last sweep)",
            preservation.expired_held,
        )
        yield _gauge(
            "registry_eviction_enabled",
            "1 when eviction runs, 0 when held",
            int(preservation.judge(len(registry)).evict),
        )
        cache = app[CACHE]
        yield _counter("registry_cache_hits", "Fetches answered from the cache", cache.hits)
        yield _counter("registry_cache_misses", "Fetches that built a payload", cache.misses)
        yield _gauge("registry_cached_payloads", "Payloads in the cache", len(cache))
        yield _counter(
            "registry_status_page_renders",
            "Status pages rendered (the others answered with one rendered lately)",
            app[PAGES].made,
        )
        feed = app[FEED]
        yield _gauge("registry_watchers", "Open watch streams", feed.watchers)
        yield _gauge(
            "registry_watch_subscriptions",
            "Distinct filters (and the whole registry) the caught-up watch streams share",
            feed.fanout.subscriptions,
        )
        refused = CounterMetricFamily(
            "registry_watch_refused",
            "Watch streams refused 429: the node's cap (node) or one client's (credential)",
            labels=["reason"],
        )
        for reason in REASONS:
            refused.add_metric([reason], feed.streams.refused[reason])
        yield refused
        yield feed.fanout.durations.family(
            "registry_watch_fanout_seconds",
            "From a change to its last write to the watch streams that had caught up",
        )
        yield _gauge("registry_long_polls", "Long-polls waiting", feed.polls)
        limiter = app[LIMITER]
        if limiter is not None:
            yield _counter(
                "registry_fetches_throttled", "Fetches answered 429 (rate limit)", limiter.throttled
            )
            yield _gauge("registry_fetch_clients", "Clients with a fetch bucket", len(limiter))
        connections = app[CONNECTIONS]
        yield _gauge("registry_connections", "Client connections open", connections.total)
        yield _counter(
            "registry_connections_refused",
            "Connections closed as they opened, their address over its cap",
            connections.refused,
        )
        yield _counter(
            "registry_request_heads_timed_out",
            "Connections closed for sending no request head in time",
            connections.timed_out,
        )
        memory = app[MEMORY]
        yield _gauge(
            "registry_memory_resident_bytes", "Resident memory, as last read", memory.resident
        )
        yield _gauge(
            "registry_memory_watermark_bytes",
            "Above it clients' new instances are refused (0: no watermark)",
            memory.watermark,
        )
        yield from app[REQUESTS].collect()
        yield from _loop_lag(app)
        yield from _peers(app)
        yield from _store(app)
        yield from _checks(app)


def _peers(app: web.Application) -> Iterator[Metric]:
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        "queueDepth": GaugeMetricFamily(
            "registry_replication_queue", "Tasks waiting for a peer", labels=["peer"]
        ),
        "sent": CounterMetricFamily(
            "registry_replication_sent", "Items sent to a peer", labels=["peer"]
        ),
        "retried": CounterMetricFamily(
            "registry_replication_retried", "Batches sent again", labels=["peer"]
        ),
        "dropped": CounterMetricFamily(
            "registry_replication_dropped", "Tasks dropped (queue full)", labels=["peer"]
        ),
        "failed": CounterMetricFamily(
            "registry_replication_failed", "Items a peer refused", labels=["peer"]
        ),
    }
    cluster = app[CLUSTER]
    for peer in cluster.status():
        for key, family in families.items():
            family.add_metric([peer["url"]], peer[key])
    yield from families.values()
    yield _gauge("registry_peers", "Peers this node replicates to", len(cluster.dispatchers))
    dns = cluster.membership.dns
    if dns is not None:
        lookups = CounterMetricFamily(
            "registry_peer_dns_lookups", "Lookups of peers.dns_name", labels=["result"]
        )
        lookups.add_metric(["ok"], dns.lookups - dns.failures)
        lookups.add_metric(["failed"], dns.failures)
        yield lookups
        yield _gauge(
            "registry_peer_dns_failing",
            "1 while lookups of peers.dns_name fail (the last peers are kept)",
            int(dns.failing_since_ms is not None),
        )
        yield _gauge(
            "registry_peer_dns_dropped",
            "Peers the last answer named beyond peers.dns_max_peers (not taken)",
            dns.dropped,
        )
        refused = GaugeMetricFamily(
            "registry_peer_dns_refused",
            "Addresses of the last answer no peer can have (not taken), by why",
            labels=["reason"],
        )
        for reason, count in sorted(dns.refused.items()):
            refused.add_metric([reason], count)
        yield refused


def _loop_lag(app: web.Application) -> Iterator[Metric]:
    lag = app[LOOP_LAG]
    yield lag.histogram.family(
        "registry_event_loop_lag_seconds", "How late the event loop ran a callback due every 10 ms"
    )
    yield _gauge(
        "registry_event_loop_lag_recent_max_seconds",
        "The longest event-loop lag in the last 10 seconds",
        lag.recent_max(asyncio.get_running_loop().time()),
    )
    yield _gauge(
        "registry_event_loop_lag_max_seconds", "The longest event-loop lag since start", lag.longest
    )


def _store(app: web.Application) -> Iterator[Metric]:
    writer = app[WRITER]
    if writer is None:
        return
    yield _counter("registry_store_batches", "Batches written to the store", writer.batches)
    yield _counter("registry_store_failures", "Store writes that failed", writer.failures)
    yield _gauge("registry_store_pending", "Changes not on disk yet", writer.pending)
    yield _gauge("registry_store_degraded", "1 while the store fails", int(writer.degraded))
    yield _gauge(
        "registry_store_corrupt_moved_aside",
        "1 when this run moved a corrupt database aside (and went on without it)",
        int(writer.moved_aside is not None),
    )


def _checks(app: web.Application) -> Iterator[Metric]:
    checker = app[CHECKER]
    if checker is None:
        return
    stats = checker.stats
    yield _counter("registry_health_checks", "Server-side health checks run", stats.checks)
    yield _counter(
        "registry_health_check_failures", "Server-side health checks failed", stats.failures
    )
    yield _counter(
        "registry_health_check_errors",
        "Server-side health checks this node could not run for a fault of its own (logged)",
        stats.errors,
    )
    skipped = CounterMetricFamily(
        "registry_health_checks_skipped",
        "Server-side health checks not run, by why: address_rate (checks.rate_per_address),"
        " behind (checks.rate), still_running (its last check), credential_limit "
        "(registrations refused one: checks.max_per_credential)",
        labels=["reason"],
    )
    for reason in SKIP_REASONS:
        skipped.add_metric([reason], stats.skipped[reason])
    yield skipped
    yield stats.latency.family(
        "registry_health_check_seconds", "How long a server-side health check took"
    )
    yield _gauge(
        "registry_health_checked_instances",
        "Instances with a server-side check",
        len(checker.checked),
    )
    yield _gauge(
        "registry_instances_down_by_check",
        "Instances a server-side check holds DOWN",
        len(app[REGISTRY].checks),
    )
    yield _gauge(
        "registry_application_checks",
        "Applications an admin set a check on",
        len(app[REGISTRY].app_checks),
    )
    yield _gauge(
        "registry_instances_not_checkable",
        "Instances their application's check cannot be run for (see status/explain)",
        len(checker.unchecked),
    )


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def collector_registry(app: web.Application, counts: InstanceCounts) -> CollectorRegistry:
    """A Prometheus registry of this app alone (tests run several apps in one process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RegistryCollector(app, counts))
    return registry


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics"""
    body = generate_latest(request.app[METRICS])
    response = web.Response(body=body)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response
