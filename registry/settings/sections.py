"""The sections of the settings, one frozen msgspec struct each: `[server]`, `[credentials]`,
`[leases]`, `[self_preservation]`, `[reads]`, `[peers]`, `[checks]`, `[store]`, `[limits]`,
`[logging]`.

A key's type says what msgspec refuses on its own (`Annotated[float, Meta(gt=0)]`: a duration
above 0); `_problems` says what it cannot (an address, a URL, two keys together), each problem
named `section.key`. Durations are in seconds. msgspec checks the types and constraints when it
converts (a file, the environment, `Settings.of`); `Settings` checks them again when it is built
directly, and the rules in `_problems` run however a section is made.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec
from msgspec import Meta

from registry.settings.errors import SettingsError
from registry.settings.values import (
    MAX_BATCH_ITEMS,
    MINUTES,
    SECONDS,
    basic_problem,
    client_applications,
    client_vip_addresses,
    is_dns_name,
    nameserver,
    network_problem,
    peer_url_problem,
    shown_url,
)

Duration = Annotated[float, Meta(gt=0)]  # seconds, above 0
Pause = Annotated[float, Meta(ge=0)]  # seconds; 0 turns it off
Cap = Annotated[int, Meta(ge=0)]  # how many at most; 0: no cap
Count = Annotated[int, Meta(ge=1)]
Share = Annotated[float, Meta(gt=0, le=1)]
Rate = Annotated[float, Meta(ge=1)]  # a second
Port = Annotated[int, Meta(gt=0, lt=65536)]
Texts = tuple[str, ...]


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One `[section]` of the settings."""

    NAME: ClassVar[str]
    SECRETS: ClassVar[frozenset[str]] = frozenset()  # keys whose values are never shown

    def __post_init__(self) -> None:
        problems = [f"{self.NAME}.{key}: {problem}" for key, problem in self._problems()]
        if problems:
            raise SettingsError(*problems)

    def _problems(self) -> list[tuple[str, str]]:
        """(key, problem) for what the keys' types cannot refuse."""
        return []

    def __repr__(self) -> str:
        shown = (
            f"{key}={'****' if key in self.SECRETS and value else repr(value)}"
            for key, value in ((key, getattr(self, key)) for key in self.__struct_fields__)
        )
        return f"{type(self).__name__}({', '.join(shown)})"


class ServerSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    NAME: ClassVar[str] = "server"

    host: str = "127.0.0.1"  # loopback until credentials exist to protect a wider bind
    port: Port = 8761
    insecure_public_bind: bool = False  # serve a non-loopback address without credentials
    # Reverse proxies (addresses or networks) whose X-Forwarded-Prefix the page follows
    trusted_proxies: Texts = ()
    # After SIGTERM, /readyz answers 503 but everything is served this long, so that load
    # balancers stop sending first (Kubernetes: endpoints are updated after the signal)
    shutdown_delay: Pause = 0 * SECONDS
    gc_freeze_interval: Pause = 1 * SECONDS  # 0: never set objects aside (registry/health/heap.py)

    def _problems(self) -> list[tuple[str, str]]:
        return [
            ("trusted_proxies", problem)
            for problem in map(network_problem, self.trusted_proxies)
            if problem
        ]


class CredentialSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Credentials by plane (`user:password` for HTTP Basic); none at all: open, on loopback
    only."""

    NAME: ClassVar[str] = "credentials"
    SECRETS: ClassVar[frozenset[str]] = frozenset({"clients", "admins", "admin_tokens", "peer"})

    clients: Texts = ()
    # "user=APP|APP": the client credential `user` may register, renew and cancel instances of
    # those applications only (a credential not listed may act on any; reads are not bound)
    client_applications: Texts = ()
    # "user=VIP|VIP": more names such a bound credential's instances may give as vipAddress or
    # secureVipAddress (its applications' own names always; nothing else unless listed here)
    client_vip_addresses: Texts = ()
    admins: Texts = ()
    admin_tokens: Texts = ()  # HTTP bearer tokens
    # Required of peers; proven to them by signing each request with it, never sent itself
    peer: str = ""
    # A peer listed in [peers] urls that refuses the signature (401: a stock Eureka server, or
    # a node of an earlier release during a rolling upgrade) gets it as HTTP Basic instead;
    # never a peer found by DNS.
    peer_basic_fallback: bool = False

    @property
    def configured(self) -> bool:
        """Some credential is configured: every plane asks for its own."""
        return bool(self.clients or self.admins or self.admin_tokens or self.peer)

    def _problems(self) -> list[tuple[str, str]]:
        problems = [
            (key, problem)
            for key in ("clients", "admins")
            for problem in {basic_problem(c) for c in getattr(self, key)}
            if problem
        ]
        if self.peer and (problem := basic_problem(self.peer)):
            problems.append(("peer", problem))
        if any(not token or any(c.isspace() for c in token) for token in self.admin_tokens):
            problems.append(("admin_tokens", "a token must be non-empty, without spaces"))
        problems += self._binding_problems()
        return problems

    def _binding_problems(self) -> list[tuple[str, str]]:
        try:
            bound = client_applications(self.client_applications)
        except ValueError as exc:
            return [("client_applications", str(exc))]
        users = {c.partition(":")[0] for c in self.clients}
        problems = [
            ("client_applications", f"{user!r} is the user of no client credential")
            for user in bound
            if user not in users
        ]
        try:
            vips = client_vip_addresses(self.client_vip_addresses)
        except ValueError as exc:
            return [*problems, ("client_vip_addresses", str(exc))]
        problems += [
            (
                "client_vip_addresses",
                f"{user!r} is bound to no application (client_applications); an unbound "
                "credential may give any VIP address",
            )
            for user in vips
            if user not in bound
        ]
        return problems


class LeaseSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    NAME: ClassVar[str] = "leases"

    legacy_expiry: bool = False  # Eureka's 2 x duration after the last renewal
    eviction_interval: Duration = 5 * SECONDS
    eviction_max_fraction: Share = 0.15  # of the registry, per run (Eureka's cap)
    sync_when_timestamp_differs: bool = True
    # A lastDirtyTimestamp further ahead of this node's clock is refused: one no clock has
    # reached would win every later conflict, pinning the record against its real owner.
    max_clock_skew: Duration = 5 * MINUTES
    # A registration's own lastDirtyTimestamp further ahead of this node's clock than this is
    # taken as this far ahead: a client (or one that took its id) dating itself minutes ahead
    # would otherwise outrank the owner's later registrations on every node for as long.
    client_clock_skew: Pause = 5 * SECONDS
    # Removals are remembered this long, so that no path brings a removed instance back
    # (registry/core/tombstones.py): well beyond an outage, and beyond any lease a copy could hold.
    tombstone_retention: Duration = 60 * MINUTES
    # A copy with the same lastDirtyTimestamp as a removal wins over it only when it was
    # renewed this much later: more than the nodes' clocks may differ (NTP: milliseconds).
    removal_margin: Pause = 10 * SECONDS

    def _problems(self) -> list[tuple[str, str]]:
        return [
            (key, f"at most max_clock_skew ({self.max_clock_skew:g}), not {getattr(self, key):g}")
            for key in ("client_clock_skew", "removal_margin")
            if getattr(self, key) > self.max_clock_skew
        ]


class SelfPreservationSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Hold eviction when renewals drop as if the network, not the instances, failed."""

    NAME: ClassVar[str] = "self_preservation"

    enabled: bool = True
    renewal_percent_threshold: Share = 0.85
    renewal_threshold_update_interval: Duration = 15 * MINUTES
    # Renewals are counted, and eviction capped, per this window: Eureka's minute. Shorter only
    # where waiting minutes is not an option (a test of self-preservation on a real process).
    renewal_window: Duration = 1 * MINUTES
    min_instances: Cap = 10  # smaller registries always evict
    accept_lasting_drop: bool = True  # held a whole recount: a scale-down


class ReadSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    NAME: ClassVar[str] = "reads"

    disable_delta: bool = False
    # Push: the SSE stream (GET watch) and the long-poll delta (apps/delta?index=N&wait=30s).
    # Off, the watch answers 403 and the delta ignores index and wait, as a stock Eureka server.
    watch: bool = True
    long_poll: bool = True
    # Watch streams a node serves at once, and one client (its credential's user, or its
    # address without credentials) may hold; 429 beyond; 0: no cap (registry/http/watch_api.py)
    watch_streams_max: Cap = 10_000
    watch_streams_per_credential: Cap = 2_000
    delta_retention: Duration = 3 * MINUTES
    delta_cleanup_interval: Duration = 30 * SECONDS
    # Fetch documents are rebuilt on every change, and at the latest after this long
    response_cache_max_age: Duration = 30 * SECONDS
    # Eureka's read-only layer: reads lag writes by up to the update interval
    use_read_only_response_cache: bool = False
    response_cache_update_interval: Duration = 30 * SECONDS


class PeerSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Other nodes, listed or found by DNS, and how changes reach them."""

    NAME: ClassVar[str] = "peers"

    # Other nodes' base URLs (http://10.0.0.2:8761/eureka/); this node skips itself
    urls: Texts = ()
    my_url: str = ""  # this node's own URL, when peers name it in a way it cannot recognise
    # Peers from DNS (peers/peer_dns.py): every address this name has is a peer at
    # http://ADDRESS:{dns_port}{dns_path}, or each target and port of its SRV records;
    # looked up at start and every dns_interval, beside the urls above.
    dns_name: str = ""
    dns_port: Port = 8761
    dns_path: str = "/eureka/"
    dns_interval: Duration = 15 * SECONDS
    # A peer gone from DNS is dropped this long after it was last seen (a restart keeps it)
    dns_grace: Pause = 60 * SECONDS
    dns_nameservers: Texts = ()  # host:port each; none: the system's
    # At most this many peers are taken from an answer (the first, by address); the rest are
    # counted and shown. A cluster is a handful of nodes: 300 addresses are a bad answer.
    dns_max_peers: Count = 16
    # Items a batch carries, up to MAX_BATCH_ITEMS (what peers take in a batch)
    batch_size: Annotated[int, Meta(ge=1, le=MAX_BATCH_ITEMS)] = 250
    batch_delay: Duration = 0.5 * SECONDS  # how long a heartbeat waits to coalesce
    # How long any other change waits: long enough to gather a burst made in one go; under
    # load, changes gather anyway while the batch before them is in flight.
    change_delay: Duration = 0.005 * SECONDS
    max_pending: Count = 10_000  # per peer; heartbeats are dropped first
    max_backoff: Duration = 30 * SECONDS  # a busy peer (timeouts, 503s)
    # A peer that cannot be reached is tried again at least this often, so its return is
    # noticed in seconds (and anti-entropy with it runs at once).
    probe_interval: Duration = 2 * SECONDS
    connect_timeout: Duration = 1 * SECONDS
    read_timeout: Duration = 5 * SECONDS
    sync_budget: Duration = 30 * SECONDS  # start-up copy from peers: total time for attempts
    sync_empty_window: Duration = 5 * MINUTES  # reads answer 403 at most this long
    anti_entropy_interval: Duration = 30 * SECONDS

    @property
    def configured(self) -> bool:
        """Peers are listed or looked up: this node replicates."""
        return bool(self.urls or self.dns_name)

    def dns(self) -> tuple[object, ...]:
        """How peers are found by DNS (every `dns_*` key): a change of it takes a restart."""
        return tuple(getattr(self, key) for key in self.__struct_fields__ if key.startswith("dns_"))

    def _problems(self) -> list[tuple[str, str]]:
        own = (self.my_url,) if self.my_url else ()
        problems = [
            (key, f"{shown_url(url)!r} {problem}")
            for key, urls in (("urls", self.urls), ("my_url", own))
            for url in urls
            if (problem := peer_url_problem(url))
        ]
        if self.dns_name and not is_dns_name(self.dns_name):
            problems.append(("dns_name", f"{self.dns_name!r} is not a DNS name"))
        path = self.dns_path
        if not (path.startswith("/") and path.endswith("/")) or any(c in path for c in "?# \t"):
            problems.append(
                (
                    "dns_path",
                    f"{path!r} must be a path starting and ending with / (peers' requests are "
                    "made below it)",
                )
            )
        for server in self.dns_nameservers:
            try:
                nameserver(server)
            except ValueError as exc:
                problems.append(("dns_nameservers", str(exc)))
        return problems


class CheckSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Server-side health checks an instance asks for in its metadata (registry/checks/)."""

    NAME: ClassVar[str] = "checks"

    enabled: bool = True
    loopback: bool = False  # checks to loopback and link-local addresses (tests)
    # Whether an instance's metadata may ask for a check (admins' checks are not affected)
    clients: bool = True
    # Where a check to an address a client gave may go besides public (globally routable)
    # addresses: the networks instances live in (registry/checks/destinations.py)
    networks: Texts = ()
    # A client's check: at most this often (from 1 to 3600 seconds)
    min_interval: Annotated[float, Meta(ge=1, le=3600)] = 5 * SECONDS
    rate_per_address: Rate = 10.0  # checks started a second towards one address
    # Instances with a check one client credential registered on this node; 0: no cap
    max_per_credential: Cap = 1000
    rate: Rate = 1000.0  # checks started a second, all instances together
    concurrency: Count = 256  # checks running at once
    failures: Count = 3  # in a row: the instance is held DOWN
    successes: Count = 2  # in a row: released

    def _problems(self) -> list[tuple[str, str]]:
        return [
            ("networks", f"{network!r} is not a network (10.0.0.0/8)")
            for network in self.networks
            if network_problem(network)
        ]


class StoreSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Persistence: the registry and overrides in SQLite, so a restart loses nothing."""

    NAME: ClassVar[str] = "store"

    enabled: bool = True
    data_dir: str = "data"  # the database is data_dir/registry.db
    flush_interval: Duration = 0.2 * SECONDS  # changes are written behind, this far apart
    busy_timeout: Duration = 5 * SECONDS  # a write waits this long for another's lock
    # A corrupt database at start-up: moved aside and the node starts empty (said in status,
    # /readyz, a metric and the log), or, with this, the node refuses to start.
    refuse_corrupt: bool = False
    # A store that could not be restored (corrupt, or unreadable) on a node with no peer to
    # copy: reads stay closed for [peers] sync_empty_window, or, with this, open at once (empty).
    serve_empty: bool = False
    override_history_retention: Duration = 30 * 24 * 60 * MINUTES  # the audit trail's length


class LimitSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What clients may register and send (0: no cap), refused beyond."""

    NAME: ClassVar[str] = "limits"

    # Refused 403 limit_reached beyond
    max_applications: Cap = 10_000
    max_instances_per_application: Cap = 20_000
    max_instances_per_credential: Cap = 0  # new instances one client user may hold
    # Above this resident memory (MiB) clients' new instances get 503; 0: 90 % of the
    # container's memory limit, or none without one (registry/health/memory.py)
    memory_watermark_mb: Cap = 0
    max_body_bytes: Annotated[int, Meta(ge=1024)] = 1024 * 1024
    # Connections one client address may hold open at once (0: no cap); behind a reverse
    # proxy every client has the proxy's address (registry/http/connections.py)
    max_connections_per_address: Cap = 512
    request_head_timeout: Duration = 10 * SECONDS  # to send a request's head once it starts
    # Registry fetches (full, delta, application, VIP) per client address; 0: no limit
    fetch_rate_limit: Annotated[float, Meta(ge=0)] = 20.0  # a second, sustained
    fetch_burst: Count = 100  # at once: a host's instances all starting together


class LogSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    NAME: ClassVar[str] = "logging"

    level: Literal["debug", "info", "warning", "error"] = "info"
    # auto: console on a terminal, JSON lines otherwise
    format: Literal["auto", "json", "console"] = "auto"
    access_log: bool = False
    # One info line counting registrations, cancels, evictions and renewals this often
    activity_interval: Duration = 60 * SECONDS


# Every section, in the order the settings file and `config show` list them.
SECTIONS: tuple[type[Section], ...] = (
    ServerSettings,
    CredentialSettings,
    LeaseSettings,
    SelfPreservationSettings,
    ReadSettings,
    PeerSettings,
    CheckSettings,
    StoreSettings,
    LimitSettings,
    LogSettings,
)
