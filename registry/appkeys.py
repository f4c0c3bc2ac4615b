"""Where the application keeps its parts; handlers and cleanup contexts read them from here."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry

from peers.cluster import Cluster
from peers.digest import Digests
from registry.checks.checker import Checker
from registry.common.clock import Clock
from registry.core.preservation import SelfPreservation
from registry.core.quotas import CredentialQuotas
from registry.core.registry import Registry
from registry.health.loop_lag import LoopLag
from registry.health.memory import MemoryGuard
from registry.health.request_stats import RequestStats
from registry.http.connections import Connections
from registry.http.credentials import Credentials
from registry.http.page_view import Tallies
from registry.http.ratelimit import FetchLimiter
from registry.lifecycle import Lifecycle
from registry.reads.cache import Recent, ResponseCache
from registry.reads.catalog import Catalog
from registry.reads.feed import ChangeFeed
from registry.reads.journal import DeltaJournal
from registry.reads.zoned import ZonedBlocks
from registry.settings import Settings
from registry.store.writer import StoreWriter

REGISTRY = web.AppKey("registry", Registry)
JOURNAL = web.AppKey("journal", DeltaJournal)
CACHE = web.AppKey("cache", ResponseCache)
CATALOG = web.AppKey("catalog", Catalog)  # every application's instances, encoded
ZONED = web.AppKey("zoned", ZonedBlocks)  # zone-filtered documents' blocks
CLOCK = web.AppKey("clock", Clock)
SETTINGS = web.AppKey("settings", Settings)
# What requests are checked against; None when no credentials are configured (no guards).
CREDENTIALS: web.AppKey[Credentials | None] = web.AppKey("credentials")
CHECKER: web.AppKey[Checker | None] = web.AppKey("checker")  # server-side health checks
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)  # the phase: starting, ..., serving, ...
CLUSTER = web.AppKey("cluster", Cluster)
DIGESTS = web.AppKey("digests", Digests)  # per application, for anti-entropy
PRESERVATION = web.AppKey("preservation", SelfPreservation)
FEED = web.AppKey("feed", ChangeFeed)
# The store's writer; None when the store is off, or could not be opened (then say why).
WRITER: web.AppKey[StoreWriter | None] = web.AppKey("writer")
RESTORED = web.AppKey("restored", int)  # instances a warm restart brought back
STARTED_AT = web.AppKey("started_at", float)  # monotonic seconds, for uptime
# Per-client fetch buckets; None when limits.fetch_rate_limit is 0
LIMITER: web.AppKey[FetchLimiter | None] = web.AppKey("limiter")
REQUESTS = web.AppKey("requests", RequestStats)  # counts and latencies, for /metrics
LOOP_LAG = web.AppKey("loop_lag", LoopLag)  # how late the event loop runs, for /metrics
CONNECTIONS = web.AppKey("connections", Connections)  # open ones by client address, capped
PAGES = web.AppKey("pages", Recent)  # the status page as lately rendered, by how it looks
TALLIES = web.AppKey("tallies", Tallies)  # the page's counts by application, status and zone
MEMORY = web.AppKey("memory", MemoryGuard)  # resident memory against its watermark
# Instances by the client credential that registered them; None without a cap
QUOTAS: web.AppKey[CredentialQuotas | None] = web.AppKey("quotas")
METRICS = web.AppKey("metrics", CollectorRegistry)  # this app's own Prometheus registry
