"""What check an instance asks for, read from its metadata, and where the check may go.

    registry.check            http (GET its healthCheckUrl, healthy on 2xx) or tcp (connect)
    registry.check.interval   seconds between checks (default 10)
    registry.check.timeout    seconds one check may take (default 2)

Guard rails, so that a client aims the registry at its own instance only (as far as the
registry can tell: `ipAddr` is what the client says): a check goes to the instance's own
`ipAddr`, an address (a name could be made to resolve anywhere), on its own port (its secure
port for an https URL or when only that is enabled); an http URL must name the instance's
address or host name and that port, and is requested from the address with the URL's host in
the Host header. Loopback, link-local, unspecified, multicast and reserved addresses (and the
IPv6 forms of such IPv4 ones) are refused unless `health_check_loopback`. A registration
asking for a check that breaks these is refused (400) naming the rule. Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from registry.core.checks import CHECK_KEY
from registry.core.model import InstanceInfo
from registry.errors import BadInput
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


def check_spec(instance: InstanceInfo, *, allow_loopback: bool) -> CheckSpec | None:
    """The check `instance` asks for, None when it asks for none; BadInput when what it asks
    for breaks a rule (the message names the field)."""
    metadata = instance.metadata
    kind = metadata.get(KIND)
    if kind is None:
        return None
    if kind not in KINDS:
        raise BadInput(f"metadata.{KIND}", f"{kind!r} is not one of {', '.join(KINDS)}")
    interval = _seconds(metadata, INTERVAL, DEFAULT_INTERVAL, MIN_INTERVAL, MAX_INTERVAL)
    timeout = _seconds(metadata, TIMEOUT, DEFAULT_TIMEOUT, 0.1, min(MAX_TIMEOUT, interval))
    address = _address(instance.ip_addr, allow_loopback)
    if kind == "tcp":
        port = _own_port(instance, secure=not instance.port.enabled)
        return CheckSpec("tcp", address, port, interval, timeout)
    url = instance.health_check_url or instance.secure_health_check_url
    if not url:
        raise BadInput("healthCheckUrl", f"{KIND}=http needs a healthCheckUrl to GET")
    field = "healthCheckUrl" if instance.health_check_url else "secureHealthCheckUrl"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise BadInput(field, f"{url!r} is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise BadInput(field, f"{url!r} is not an http:// or https:// URL")
    if host not in (instance.ip_addr.lower(), instance.host_name.lower()):
        raise BadInput(
            field,
            f"{url!r} names {host!r}, not this instance ({instance.ip_addr} or "
            f"{instance.host_name}): a check goes to the instance itself only",
        )
    try:
        url_port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise BadInput(field, f"{url!r} has an invalid port") from None
    port = _own_port(instance, secure=parts.scheme == "https")
    if url_port != port:
        raise BadInput(
            field,
            f"{url!r} asks port {url_port}, not this instance's {port}: a check goes to the "
            "instance's own port only",
        )
    # As a request line carries it: what is not allowed there percent-encoded.
    target = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_PATH_SAFE)
    return CheckSpec("http", address, port, interval, timeout, parts.scheme, host, target)


def refuse_bad_check(instance: InstanceInfo, settings: Settings) -> None:
    """BadInput (400) when `instance` asks for a check this node would not run: what a
    registration or a metadata change is held to before it changes anything."""
    if settings.health_checks:
        check_spec(instance, allow_loopback=settings.health_check_loopback)


def _seconds(
    metadata: Mapping[str, str], key: str, default: float, low: float, high: float
) -> float:
    raw = metadata.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"metadata.{key}", f"{raw!r} is not a number of seconds") from None
    if not low <= value <= high:
        raise BadInput(f"metadata.{key}", f"{raw} is not from {low:g} to {high:g} seconds")
    return value


# Addresses that stand for an IPv4 one (and reach it): judged as that one, and checked there.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Where clouds answer with their instances' metadata and credentials, by IPv6 too.
_METADATA = frozenset({ipaddress.ip_address("fd00:ec2::254")})


def _address(ip_addr: str, allow_loopback: bool) -> str:
    try:
        address = _unwrapped(ipaddress.ip_address(ip_addr))
    except ValueError:
        raise BadInput(
            "ipAddr", f"{ip_addr!r} is not an address: a checked instance is checked there"
        ) from None
    special = (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        or address in _METADATA
    )
    if special and not allow_loopback:
        raise BadInput(
            "ipAddr",
            f"{ip_addr} is a loopback, link-local, unspecified, multicast or reserved "
            "address: not checked from the registry (health_check_loopback allows it)",
        )
    return str(address)


def _unwrapped(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv6 one carries (mapped ::ffff:a.b.c.d, 6to4, Teredo, NAT64),
    else the address itself: Python 3.11 judges ::ffff:127.0.0.1 as no loopback."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _own_port(instance: InstanceInfo, *, secure: bool) -> int:
    port = instance.secure_port if secure else instance.port
    if not port.enabled:
        which = "securePort" if secure else "port"
        raise BadInput(which, f"the check needs this instance's {which} enabled")
    return port.number


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
