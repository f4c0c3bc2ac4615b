"""Settings: one frozen object, read once at start-up.

Layers, later ones winning: the defaults below (the same values as `config/default.toml`), a TOML
file, environment variables `REGISTRY_<KEY>` (e.g. `REGISTRY_PORT=8762`), then command-line
flags. Durations are in seconds. A bad value fails at start-up, naming its key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SECONDS = 1.0
MINUTES = 60 * SECONDS
ENV_PREFIX = "REGISTRY_"
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_BATCH_ITEMS = 1000  # a peer's batch holds at most this many items (Eureka's peers send 250)
SECRETS = frozenset({"client_credentials", "admin_credentials", "admin_tokens", "peer_credential"})


# What Kubernetes puts in a pod's environment for a Service named `registry` or `registry-*`
# (service links): REGISTRY[_X]_SERVICE_HOST, ..._SERVICE_PORT[_NAME], ..._PORT_8761_TCP[_ADDR]
_SERVICE_LINK = re.compile(r"REGISTRY(_\w+)?_(SERVICE_(HOST|PORT)|PORT_\d+_(TCP|UDP|SCTP))")
_SERVICE_LINK_VALUE = re.compile(r"(tcp|udp|sctp)://", re.IGNORECASE)


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    host: str = "127.0.0.1"  # loopback until credentials exist to protect a wider bind
    port: int = 8761
    # Credentials by plane (`user:password` for HTTP Basic); none at all: open, on loopback only
    client_credentials: tuple[str, ...] = field(default=(), repr=False)
    # "user=APP|APP": the client credential `user` may register, renew and cancel instances of
    # those applications only (a credential not listed may act on any; reads are not bound)
    client_applications: tuple[str, ...] = ()
    # "user=VIP|VIP": more names such a bound credential's instances may give as vipAddress or
    # secureVipAddress (its applications' own names always; nothing else unless listed here)
    client_vip_addresses: tuple[str, ...] = ()
    admin_credentials: tuple[str, ...] = field(default=(), repr=False)
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)  # HTTP bearer tokens
    # Required of peers; proven to them by signing each request with it, never sent itself
    peer_credential: str = field(default="", repr=False)
    # A peer listed in `peers` that refuses the signature (401: a stock Eureka server, or a
    # node of an earlier release during a rolling upgrade) gets it as HTTP Basic instead;
    # never a peer found by DNS.
    peer_basic_fallback: bool = False
    insecure_public_bind: bool = False  # serve a non-loopback address without credentials
    # Reverse proxies (addresses or networks) whose X-Forwarded-Prefix the page follows
    trusted_proxies: tuple[str, ...] = ()
    # Leases and eviction
    legacy_lease_expiry: bool = False  # Eureka's 2 x duration after the last renewal
    eviction_interval: float = 5 * SECONDS
    eviction_max_fraction: float = 0.15  # of the registry, per run (Eureka's cap)
    sync_when_timestamp_differs: bool = True
    # A lastDirtyTimestamp further ahead of this node's clock is refused: one no clock has
    # reached would win every later conflict, pinning the record against its real owner.
    max_clock_skew: float = 5 * 60 * SECONDS
    # A registration's own lastDirtyTimestamp further ahead of this node's clock than this is
    # taken as this far ahead: a client (or one that took its id) dating itself minutes ahead
    # would otherwise outrank the owner's later registrations on every node for as long.
    client_clock_skew: float = 5 * SECONDS
    # Self-preservation: hold eviction when renewals drop as if the network failed
    self_preservation: bool = True
    renewal_percent_threshold: float = 0.85
    renewal_threshold_update_interval: float = 15 * MINUTES
    # Renewals are counted, and eviction capped, per this window: Eureka's minute. Shorter only
    # where waiting minutes is not an option (a test of self-preservation on a real process).
    renewal_window: float = 1 * MINUTES
    self_preservation_min_instances: int = 10  # smaller registries always evict
    self_preservation_accept_lasting_drop: bool = True  # held a whole recount: a scale-down
    # Delta journal
    disable_delta: bool = False
    # Push: the SSE stream (GET watch) and the long-poll delta (apps/delta?index=N&wait=30s).
    # Off, the watch answers 403 and the delta ignores index and wait, as a stock Eureka server.
    watch: bool = True
    long_poll: bool = True
    # Watch streams a node serves at once, and one client (its credential's user, or its
    # address without credentials) may hold; 429 beyond; 0: no cap (registry/http/watch_api.py)
    watch_streams_max: int = 10_000
    watch_streams_per_credential: int = 2_000
    delta_retention: float = 3 * MINUTES
    delta_cleanup_interval: float = 30 * SECONDS
    activity_log_interval: float = 60 * SECONDS
    gc_freeze_interval: float = 1 * SECONDS  # 0: never set objects aside (registry/health/heap.py)
    # Fetch documents are rebuilt on every change, and at the latest after this long
    response_cache_max_age: float = 30 * SECONDS
    # Eureka's read-only layer: reads lag writes by up to the update interval
    use_read_only_response_cache: bool = False
    response_cache_update_interval: float = 30 * SECONDS
    # Peers: other nodes' base URLs (http://10.0.0.2:8761/eureka/); this node skips itself
    peers: tuple[str, ...] = ()
    my_url: str = ""  # this node's own URL, when peers name it in a way it cannot recognise
    # Peers from DNS (peers/peer_dns.py): every address this name has is a peer at
    # http://ADDRESS:{peer_dns_port}{peer_dns_path}, or each target and port of its SRV records;
    # looked up at start and every peer_dns_interval, beside the `peers` above.
    peer_dns: str = ""
    peer_dns_port: int = 8761
    peer_dns_path: str = "/eureka/"
    peer_dns_interval: float = 15 * SECONDS
    # A peer gone from DNS is dropped this long after it was last seen (a restart keeps it)
    peer_dns_grace: float = 60 * SECONDS
    peer_dns_nameservers: tuple[str, ...] = ()  # host:port each; none: the system's
    # At most this many peers are taken from an answer (the first, by address); the rest are
    # counted and shown. A cluster is a handful of nodes: 300 addresses are a bad answer.
    peer_dns_max_peers: int = 16
    replication_batch_size: int = 250  # items a batch carries, up to MAX_BATCH_ITEMS
    replication_batch_delay: float = 0.5 * SECONDS  # how long a heartbeat waits to coalesce
    # How long any other change waits: long enough to gather a burst made in one go; under
    # load, changes gather anyway while the batch before them is in flight.
    replication_change_delay: float = 0.005 * SECONDS
    replication_max_pending: int = 10_000  # per peer; heartbeats are dropped first
    replication_max_backoff: float = 30 * SECONDS  # a busy peer (timeouts, 503s)
    # A peer that cannot be reached is tried again at least this often, so its return is
    # noticed in seconds (and anti-entropy with it runs at once).
    peer_probe_interval: float = 2 * SECONDS
    peer_connect_timeout: float = 1 * SECONDS
    peer_read_timeout: float = 5 * SECONDS
    peer_sync_budget: float = 30 * SECONDS  # start-up copy from peers: total time for attempts
    peer_sync_empty_window: float = 5 * MINUTES  # reads answer 403 at most this long
    anti_entropy_interval: float = 30 * SECONDS
    # Removals are remembered this long, so that no path brings a removed instance back
    # (registry/core/tombstones.py): well beyond an outage, and beyond any lease a copy could hold.
    tombstone_retention: float = 60 * MINUTES
    # A copy with the same lastDirtyTimestamp as a removal wins over it only when it was
    # renewed this much later: more than the nodes' clocks may differ (NTP: milliseconds).
    removal_margin: float = 10 * SECONDS
    # After SIGTERM, /readyz answers 503 but everything is served this long, so that load
    # balancers stop sending first (Kubernetes: endpoints are updated after the signal)
    shutdown_delay: float = 0 * SECONDS
    # Server-side health checks an instance asks for in its metadata (registry/checks/)
    health_checks: bool = True
    health_check_loopback: bool = False  # checks to loopback and link-local addresses (tests)
    # Whether an instance's metadata may ask for a check (admins' checks are not affected)
    health_check_clients: bool = True
    # Where a check to an address a client gave may go besides public (globally routable)
    # addresses: the networks instances live in (registry/checks/destinations.py)
    health_check_networks: tuple[str, ...] = ()
    health_check_min_interval: float = 5 * SECONDS  # a client's check: at most this often
    health_check_rate_per_address: float = 10.0  # checks started a second towards one address
    # Instances with a check one client credential registered on this node; 0: no cap
    health_check_max_per_credential: int = 1000
    health_check_rate: float = 1000.0  # checks started a second, all instances together
    health_check_concurrency: int = 256  # checks running at once
    health_check_failures: int = 3  # in a row: the instance is held DOWN
    health_check_successes: int = 2  # in a row: released
    # Persistence: the registry and overrides in SQLite, so a restart loses nothing
    store: bool = True
    data_dir: str = "data"  # the database is data_dir/registry.db
    store_flush_interval: float = 0.2 * SECONDS  # changes are written behind, this far apart
    store_busy_timeout: float = 5 * SECONDS  # a write waits this long for another's lock
    # A corrupt database at start-up: moved aside and the node starts empty (said in status,
    # /readyz, a metric and the log), or, with this, the node refuses to start.
    refuse_corrupt_store: bool = False
    # A store that could not be restored (corrupt, or unreadable) on a node with no peer to
    # copy: reads stay closed for peer_sync_empty_window, or, with this, open at once (empty).
    serve_empty_store: bool = False
    override_history_retention: float = 30 * 24 * 60 * MINUTES  # the audit trail's length
    # What clients may register (0: no cap), refused 403 limit_reached beyond
    max_applications: int = 10_000
    max_instances_per_application: int = 20_000
    max_instances_per_credential: int = 0  # new instances one client user may hold; 0: no cap
    # Above this resident memory (MiB) clients' new instances get 503; 0: 90 % of the
    # container's memory limit, or none without one (registry/health/memory.py)
    memory_watermark_mb: int = 0
    # HTTP
    max_body_bytes: int = 1024 * 1024
    # Connections one client address may hold open at once (0: no cap); behind a reverse
    # proxy every client has the proxy's address (registry/http/connections.py)
    max_connections_per_address: int = 512
    request_head_timeout: float = 10 * SECONDS  # to send a request's head once it starts
    # Registry fetches (full, delta, application, VIP) per client address; 0: no limit
    fetch_rate_limit: float = 20.0  # a second, sustained
    fetch_burst: int = 100  # at once: a host's instances all starting together
    access_log: bool = False
    # Logging
    log_level: str = "info"
    log_format: str = "auto"  # auto: console on a terminal, JSON lines otherwise

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"port: {self.port} is not a TCP port")
        for key in (
            "eviction_interval",
            "renewal_threshold_update_interval",
            "renewal_window",
            "delta_retention",
            "delta_cleanup_interval",
            "activity_log_interval",
            "response_cache_max_age",
            "response_cache_update_interval",
            "replication_batch_delay",
            "replication_change_delay",
            "replication_max_backoff",
            "peer_probe_interval",
            "peer_connect_timeout",
            "peer_read_timeout",
            "peer_sync_budget",
            "peer_sync_empty_window",
            "anti_entropy_interval",
            "tombstone_retention",
            "store_flush_interval",
            "store_busy_timeout",
            "override_history_retention",
            "max_clock_skew",
            "request_head_timeout",
            "peer_dns_interval",
        ):
            if getattr(self, key) <= 0:
                raise SettingsError(f"{key}: must be positive, not {getattr(self, key)}")
        for key in ("eviction_max_fraction", "renewal_percent_threshold"):
            if not 0 < getattr(self, key) <= 1:
                raise SettingsError(
                    f"{key}: must be above 0 and at most 1, not {getattr(self, key)}"
                )
        if not 0 <= self.client_clock_skew <= self.max_clock_skew:
            raise SettingsError(
                f"client_clock_skew: must be from 0 to max_clock_skew, not {self.client_clock_skew}"
            )
        if not 0 <= self.removal_margin <= self.max_clock_skew:
            raise SettingsError(
                f"removal_margin: must be from 0 to max_clock_skew, not {self.removal_margin}"
            )
        for key in (
            "self_preservation_min_instances",
            "gc_freeze_interval",
            "max_connections_per_address",
            "max_applications",
            "max_instances_per_application",
            "max_instances_per_credential",
            "memory_watermark_mb",
            "peer_dns_grace",
            "shutdown_delay",
            "watch_streams_max",
            "watch_streams_per_credential",
        ):
            if getattr(self, key) < 0:
                raise SettingsError(f"{key}: must not be negative")
        self._check_health_checks()
        for key in (
            "replication_batch_size",
            "replication_max_pending",
            "peer_dns_max_peers",
            "health_check_concurrency",
            "health_check_failures",
            "health_check_successes",
        ):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: must be at least 1, not {getattr(self, key)}")
        if self.replication_batch_size > MAX_BATCH_ITEMS:
            raise SettingsError(
                f"replication_batch_size: at most {MAX_BATCH_ITEMS} (what peers take in a batch)"
            )
        self._check_credentials()
        for url in (*self.peers, *([self.my_url] if self.my_url else [])):
            problem = peer_url_problem(url)
            if problem:
                parts = urlsplit(url)  # shown without a user or password it may carry
                shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
                raise SettingsError(f"peers: {shown!r} {problem}")
        self._check_peer_dns()
        self._check_trusted_proxies()
        if self.fetch_rate_limit < 0:
            raise SettingsError("fetch_rate_limit: must not be negative (0 turns it off)")
        if self.fetch_burst < 1:
            raise SettingsError(f"fetch_burst: must be at least 1, not {self.fetch_burst}")
        if self.max_body_bytes < 1024:
            raise SettingsError(f"max_body_bytes: {self.max_body_bytes} is too small")
        if self.log_format not in LOG_FORMATS:
            raise SettingsError(f"log_format: {self.log_format!r} is not one of {LOG_FORMATS}")
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"log_level: {self.log_level!r} is not one of {LOG_LEVELS}")

    def _check_health_checks(self) -> None:
        for key in ("health_check_rate", "health_check_rate_per_address"):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: at least 1 check a second, not {getattr(self, key)}")
        if not 1 <= self.health_check_min_interval <= 3600:
            raise SettingsError(
                "health_check_min_interval: from 1 to 3600 seconds, not "
                f"{self.health_check_min_interval}"
            )
        if self.health_check_max_per_credential < 0:
            raise SettingsError("health_check_max_per_credential: must not be negative")
        for network in self.health_check_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise SettingsError(
                    f"health_check_networks: {network!r} is not a network (10.0.0.0/8)"
                ) from None

    def _check_trusted_proxies(self) -> None:
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise SettingsError(
                    f"trusted_proxies: {proxy!r} is not an address or a network (10.0.0.0/8)"
                ) from None

    def _check_peer_dns(self) -> None:
        if self.peer_dns and not _is_dns_name(self.peer_dns):
            raise SettingsError(f"peer_dns: {self.peer_dns!r} is not a DNS name")
        if not 0 < self.peer_dns_port < 65536:
            raise SettingsError(f"peer_dns_port: {self.peer_dns_port} is not a TCP port")
        path = self.peer_dns_path
        if not (path.startswith("/") and path.endswith("/")) or any(c in path for c in "?# \t"):
            raise SettingsError(
                f"peer_dns_path: {path!r} must be a path starting and ending with / (peers' "
                "requests are made below it)"
            )
        for server in self.peer_dns_nameservers:
            try:
                nameserver(server)
            except ValueError as exc:
                raise SettingsError(f"peer_dns_nameservers: {exc}") from None

    @property
    def secured(self) -> bool:
        """Credentials are configured: every plane asks for its own."""
        return bool(
            self.client_credentials
            or self.admin_credentials
            or self.admin_tokens
            or self.peer_credential
        )

    def _check_credentials(self) -> None:
        for key in ("client_credentials", "admin_credentials"):
            for credential in getattr(self, key):
                _check_basic(key, credential)
        if self.peer_credential:
            _check_basic("peer_credential", self.peer_credential)
        users = {c.partition(":")[0] for c in self.client_credentials}
        bound = client_applications(self.client_applications)
        for user in bound:
            if user not in users:
                raise SettingsError(
                    f"client_applications: {user!r} is the user of no client credential"
                )
        for user in client_vip_addresses(self.client_vip_addresses):
            if user not in bound:
                raise SettingsError(
                    f"client_vip_addresses: {user!r} is bound to no application "
                    "(client_applications); an unbound credential may give any VIP address"
                )
        for token in self.admin_tokens:
            if not token or any(c.isspace() for c in token):
                raise SettingsError("admin_tokens: a token must be non-empty, without spaces")
        if self.secured and (self.peers or self.peer_dns) and not self.peer_credential:
            raise SettingsError(
                "peer_credential: needed to replicate to peers once credentials are configured"
            )
        missing = self.missing_credentials()
        if missing and not is_loopback(self.host) and not self.insecure_public_bind:
            raise SettingsError(
                f"host: {self.host!r} is not a loopback address, and {' and '.join(missing)} "
                "are not set; configure them, bind to 127.0.0.1, or set "
                "insecure_public_bind = true to serve anyone who can reach it"
            )

    def missing_credentials(self) -> list[str]:
        """The settings a plane in use lacks: it would be open (none at all) or closed."""
        missing = []
        if not self.client_credentials:
            missing.append("client_credentials")
        if not (self.admin_credentials or self.admin_tokens):
            missing.append("admin_credentials (or admin_tokens)")
        if (self.peers or self.peer_dns) and not self.peer_credential:
            missing.append("peer_credential")
        return missing

    @classmethod
    def load(
        cls,
        toml_path: Path | None = None,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Defaults, then the TOML file, then `REGISTRY_*` variables, then `overrides`."""
        values: dict[str, Any] = {}
        if toml_path is not None:
            values.update(_read_toml(toml_path))
        for key, raw in (environ or {}).items():
            if key.startswith(ENV_PREFIX):
                if _SERVICE_LINK.match(key) or _SERVICE_LINK_VALUE.match(raw):
                    raise SettingsError(
                        f"{key}: a variable Kubernetes sets for a Service named 'registry' or "
                        "'registry-...' (a service link), not a setting: set "
                        "enableServiceLinks: false in the pod's spec, as "
                        "deploy/kubernetes/statefulset.yaml does"
                    )
                name = key.removeprefix(ENV_PREFIX).lower()
                values[name] = _from_text(name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls._build(values)

    @classmethod
    def _build(cls, values: Mapping[str, Any]) -> Settings:
        types = _field_types()
        unknown = sorted(set(values) - set(types))
        if unknown:
            raise SettingsError(f"{unknown[0]}: unknown setting")
        coerced = {key: _coerce(key, value, types[key]) for key, value in values.items()}
        try:
            return cls(**coerced)
        except TypeError as exc:
            raise SettingsError(str(exc)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read settings from {path}: {exc}") from None


def _field_types() -> dict[str, type]:
    hints = typing.get_type_hints(Settings)
    return {f.name: hints[f.name] for f in dataclasses.fields(Settings)}


def _from_text(key: str, raw: str) -> Any:
    kind = _field_types().get(key)
    if kind is None:
        raise SettingsError(f"{key}: unknown setting ({ENV_PREFIX}{key.upper()})")
    if typing.get_origin(kind) is tuple:
        return raw
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise SettingsError(f"{key}: {raw!r} is not a boolean")
        return lowered in ("true", "1", "yes")
    return raw


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere


def _is_dns_name(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return len(name) <= 253 and all(
        0 < len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label) for label in labels
    )


def nameserver(text: str) -> tuple[str, int]:
    """`host:port` (`[::1]:5353` for IPv6; port 53 when left out) read as (address, port)."""
    address, port = text, "53"
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{text!r} is not host:port")
            port = rest[1:]
    elif text.count(":") == 1:
        address, port = text.split(":")
    try:
        ipaddress.ip_address(address)
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r} is not an address:port (a name server by address)") from None
    if not 0 < number < 65536:
        raise ValueError(f"{text!r} has an invalid port")
    return address, number


def _check_basic(key: str, credential: str) -> None:
    """`user:password`, as HTTP Basic carries it: the user without a colon (RFC 7617)."""
    user, colon, password = credential.partition(":")
    if not (user and colon and password):
        raise SettingsError(f"{key}: each credential is `user:password`, both non-empty")


def peer_url_problem(url: str) -> str | None:
    """Why `url` cannot be a peer's base URL, or None when it can."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "names no host"
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        return "has an invalid port"
    if parts.query or parts.fragment:
        return "must not carry a query or fragment"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (set peer_credential)"
    return None


def _coerce(key: str, value: Any, kind: type) -> Any:
    if key == "peers":  # each with a trailing slash, so `{url}apps/` is the right path
        return tuple(
            dict.fromkeys(u if u.endswith("/") else u + "/" for u in _text_list(key, value))
        )
    if key == "peer_dns_path" and isinstance(value, str) and not value.endswith("/"):
        value += "/"  # as for `peers`
    if typing.get_origin(kind) is tuple:
        return _text_list(key, value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    try:
        if kind is float and isinstance(value, int | str) and not isinstance(value, bool):
            return float(value)
        if kind is int and isinstance(value, str):
            return int(value)
    except ValueError:
        pass
    shown = "the value" if key in SECRETS else repr(value)  # secrets never reach a log
    raise SettingsError(f"{key}: {shown} is not a valid {kind.__name__}")


def _text_list(key: str, value: Any) -> tuple[str, ...]:
    """A list from TOML, or comma-separated from the environment or command line (so a
    password with a comma in it goes in the TOML file); blanks and repeats dropped."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(u, str) for u in items):
        raise SettingsError(f"{key}: expected a list of strings")
    return tuple(dict.fromkeys(item.strip() for item in items if item.strip()))


def client_applications(entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`client_applications` read: user -> the applications (upper case) it may act on."""
    return _bindings("client_applications", "APP", entries)


def client_vip_addresses(entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`client_vip_addresses` read: user -> the further VIP addresses (upper case) its
    instances may give."""
    return _bindings("client_vip_addresses", "VIP", entries)


def _bindings(key: str, what: str, entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`user=NAME|NAME` entries read: user -> the names, upper case (a user listed twice gets
    both entries' names)."""
    bound: dict[str, frozenset[str]] = {}
    for entry in entries:
        user, _, listed = entry.partition("=")
        names = frozenset(a.strip().upper() for a in listed.split("|") if a.strip())
        if not user.strip() or not names:
            raise SettingsError(f"{key}: {entry!r} is not user={what} or user={what}|{what}|...")
        bound[user.strip()] = bound.get(user.strip(), frozenset()) | names
    return bound
