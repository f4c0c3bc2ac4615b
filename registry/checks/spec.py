"""What check an instance asks for, read from its metadata, and where the check may go.

    registry.check            http (GET its healthCheckUrl, healthy on 2xx) or tcp (connect)
    registry.check.interval   seconds between checks (default 10)
    registry.check.timeout    seconds one check may take (default 2)

Guard rails, so that a client aims the registry at its own instance only (as far as the
registry can tell: `ipAddr` is what the client says): a check goes to the instance's own
`ipAddr`, an address (a name could be made to resolve anywhere), on its own port (its secure
port for an https URL or when only that is enabled), and only where the operator lets checks
go (registry/checks/destinations.py); an http URL must name the instance's address or host
name and that port, and is requested from the address with the URL's host in the Host header
when that is an ordinary public DNS name, else with the address (no `Host: localhost` sent to
a routable address). A client's check comes at most every `checks.min_interval` (a
shorter interval is raised to it), and none with `checks.clients` off. A registration
asking for a check that breaks these is refused (400) naming the rule. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from registry.checks.destinations import Destinations
from registry.core.app_checks import MAX_BY, AppCheck
from registry.core.checks import CHECK_KEY, held_by_server
from registry.core.model import InstanceInfo
from registry.errors import BadInput, shown
from registry.settings import Settings

KIND = CHECK_KEY
INTERVAL = "registry.check.interval"
TIMEOUT = "registry.check.timeout"
KINDS = ("http", "tcp")
DEFAULT_INTERVAL = 10.0
DEFAULT_TIMEOUT = 2.0
MIN_INTERVAL = 1.0  # a check a second per instance at most
MAX_INTERVAL = 3600.0
MAX_TIMEOUT = 30.0
_PATH_SAFE = "/?&=%:@!$'()*+,;~-._"


@dataclass(frozen=True, slots=True)
class CheckSpec:
    kind: str  # "http" or "tcp"
    address: str  # the instance's ipAddr: where the check connects
    port: int
    interval: float
    timeout: float
    scheme: str = "http"  # for http: http or https
    host: str = ""  # for http: the Host header (the URL's host)
    target: str = ""  # for http: the path and query to GET

    def describe(self) -> str:
        """Where the check goes, for status/explain and the status page."""
        if self.kind == "tcp":
            return f"tcp {_hostport(self.address, self.port)}"
        return f"http GET {self.scheme}://{_hostport(self.host, self.port)}{self.target}"


def check_spec(
    instance: InstanceInfo,
    destinations: Destinations,
    settings: Settings,
    app_check: AppCheck | None = None,
) -> CheckSpec | None:
    """The check `instance` gets: its application's admin check when there is one, else the
    one its metadata asks for; None when neither. BadInput when it breaks a rule (the message
    names the field)."""
    # The address is the client's word, unless an admin registered the instance (one the
    # registry holds the lease of: no client registers those).
    client = not held_by_server(instance)
    if app_check is not None:
        check = app_check
        return _spec(
            instance, check.kind, check.interval, check.timeout, check.path, destinations, client
        )
    metadata = instance.metadata
    kind = metadata.get(KIND)
    if kind is None:
        return None
    if kind not in KINDS:
        raise BadInput(f"metadata.{KIND}", f"{shown(kind)} is not one of {', '.join(KINDS)}")
    if client and not settings.checks.clients:
        raise BadInput(
            f"metadata.{KIND}",
            "checks.clients is false: this registry runs no check an instance asks for",
        )
    interval = _seconds(metadata, INTERVAL, DEFAULT_INTERVAL, MIN_INTERVAL, MAX_INTERVAL)
    if client:  # raised, not refused: a client that asks often still gets its checks
        interval = max(interval, settings.checks.min_interval)
    longest = min(MAX_TIMEOUT, interval)  # a check ends before the next is due
    timeout = _seconds(metadata, TIMEOUT, min(DEFAULT_TIMEOUT, longest), 0.1, longest)
    return _spec(instance, kind, interval, timeout, None, destinations, client)


def _spec(
    instance: InstanceInfo,
    kind: str,
    interval: float,
    timeout: float,
    path: str | None,
    destinations: Destinations,
    client: bool,
) -> CheckSpec:
    address = destinations.address(instance.ip_addr, client=client)
    if kind == "tcp":
        port = _own_port(instance, secure=not instance.port.enabled)
        return CheckSpec("tcp", address, port, interval, timeout)
    if path is not None:  # an admin's path, at the instance's own address and port
        secure = not instance.port.enabled
        port = _own_port(instance, secure=secure)
        scheme = "https" if secure else "http"
        return CheckSpec("http", address, port, interval, timeout, scheme, address, path)
    url = instance.health_check_url or instance.secure_health_check_url
    if not url:
        raise BadInput("healthCheckUrl", "an http check needs a healthCheckUrl to GET")
    field = "healthCheckUrl" if instance.health_check_url else "secureHealthCheckUrl"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise BadInput(field, f"{shown(url)} is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise BadInput(field, f"{shown(url)} is not an http:// or https:// URL")
    if host not in (instance.ip_addr.lower(), instance.host_name.lower()):
        raise BadInput(
            field,
            f"{shown(url)} names {host!r}, not this instance ({instance.ip_addr} or "
            f"{instance.host_name}): a check goes to the instance itself only",
        )
    try:
        url_port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise BadInput(field, f"{shown(url)} has an invalid port") from None
    port = _own_port(instance, secure=parts.scheme == "https")
    if url_port != port:
        raise BadInput(
            field,
            f"{shown(url)} asks port {url_port}, not this instance's {port}: a check goes to the "
            "instance's own port only",
        )
    # As a request line carries it: what is not allowed there percent-encoded.
    target = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_PATH_SAFE)
    # The Host header: the URL's name when any resolver would give it (a virtual host of the
    # service's own), else the address the request goes to: `localhost`, a single label or a
    # `.internal` name sent to a routable address would reach what that name means there.
    if not public_name(host):
        host = address
    return CheckSpec("http", address, port, interval, timeout, parts.scheme, host, target)


_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
# Names for inside a network (RFC 6761, 6762, 8375, 9476, and the ones in common use)
_LOCAL_SUFFIXES = frozenset(
    {
        "localhost",
        "local",
        "localdomain",
        "internal",
        "intranet",
        "lan",
        "home",
        "corp",
        "private",
        "svc",
        "test",
        "example",
        "invalid",
        "arpa",
        "alt",
        "onion",
    }
)


def public_name(host: str) -> bool:
    """Whether `host` is an ordinary public DNS name: dotted, plain labels, a top-level
    domain of letters that is not one for inside networks; no address."""
    labels = host.lower().rstrip(".").split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return False
    return labels[-1].isalpha() and labels[-1] not in _LOCAL_SUFFIXES


MAX_PATH = 1000
_APP_CHECK_FIELDS = ("check", "interval", "timeout", "path")


def app_check_from(app: str, body: object, *, now_ms: int, by: str | None = None) -> AppCheck:
    """An admin's check on `app` from the admin plane's JSON body
    `{"check": "http"|"tcp", "interval": 10, "timeout": 2, "path": "/health"}` (all but
    `check` optional; `path`, for http only, is requested at each instance's own address and
    port instead of its healthCheckUrl). BadInput naming the field for anything else."""
    if not isinstance(body, Mapping):
        raise BadInput("body", 'must be a JSON object: {"check": "http", ...}')
    unknown = sorted(str(key) for key in body if key not in _APP_CHECK_FIELDS)
    if unknown:
        raise BadInput(unknown[0], f"not a field of a check: {', '.join(_APP_CHECK_FIELDS)}")
    kind = body.get("check")
    if kind not in KINDS:
        raise BadInput("check", f"{shown(kind)} is not one of {', '.join(KINDS)}")
    interval = _number(body, "interval", DEFAULT_INTERVAL, MIN_INTERVAL, MAX_INTERVAL)
    longest = min(MAX_TIMEOUT, interval)
    timeout = _number(body, "timeout", min(DEFAULT_TIMEOUT, longest), 0.1, longest)
    path = body.get("path")
    if path is not None:
        if kind != "http":
            raise BadInput("path", "only an http check requests a path")
        if not isinstance(path, str) or not path.startswith("/") or len(path) > MAX_PATH:
            raise BadInput("path", f"must be a path from / of at most {MAX_PATH} characters")
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in path):
            raise BadInput("path", "spaces and control characters are not allowed")
        path = quote(path, safe=_PATH_SAFE)
    return AppCheck(app, kind, interval, timeout, path, now_ms, None if by is None else by[:MAX_BY])


def _number(body: Mapping[str, object], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(key, f"{shown(value)} is not a number of seconds")
    if not low <= value <= high:
        raise BadInput(key, f"{value:g} is not from {low:g} to {high:g} seconds")
    return float(value)


def _seconds(
    metadata: Mapping[str, str], key: str, default: float, low: float, high: float
) -> float:
    raw = metadata.get(key)
    if raw is None:
        return default
    try:
        value = float(raw.encode("ascii"))  # other scripts' digits are no number here
    except (UnicodeEncodeError, ValueError):
        raise BadInput(f"metadata.{key}", f"{shown(raw)} is not a number of seconds") from None
    if not low <= value <= high:
        raise BadInput(f"metadata.{key}", f"{shown(raw)} is not from {low:g} to {high:g} seconds")
    return value


def _own_port(instance: InstanceInfo, *, secure: bool) -> int:
    port = instance.secure_port if secure else instance.port
    if not port.enabled:
        which = "securePort" if secure else "port"
        raise BadInput(which, f"the check needs this instance's {which} enabled")
    return port.number


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
