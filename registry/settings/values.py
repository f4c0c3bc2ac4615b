"""What a single setting's value must look like, for the rules that msgspec's types cannot say:
addresses, networks, DNS names, peer URLs, credentials and their bindings. Each check returns
a problem (text) or None; the readers of bindings are also what the HTTP side uses."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

SECONDS = 1.0
MINUTES = 60 * SECONDS
MAX_BATCH_ITEMS = 1000  # a peer's batch holds at most this many items (Eureka's peers send 250)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere


def is_dns_name(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return len(name) <= 253 and all(
        0 < len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label) for label in labels
    )


def network_problem(text: str) -> str | None:
    """Why `text` is not an address or a network (`10.0.0.0/8`), or None."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return f"{text!r} is not an address or a network (10.0.0.0/8)"
    return None


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


def basic_problem(credential: str) -> str | None:
    """`user:password`, as HTTP Basic carries it: the user without a colon (RFC 7617). The
    problem never shows the credential."""
    user, colon, password = credential.partition(":")
    if not (user and colon and password):
        return "each credential is `user:password`, both non-empty"
    return None


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
        return "must not carry credentials (set [credentials] peer)"
    return None


def shown_url(url: str) -> str:
    """`url` without a user or password it may carry, for a message."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def client_applications(entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`credentials.client_applications` read: user -> the applications (upper case) it may
    act on."""
    return _bindings("APP", entries)


def client_vip_addresses(entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`credentials.client_vip_addresses` read: user -> the further VIP addresses (upper case)
    its instances may give."""
    return _bindings("VIP", entries)


def _bindings(what: str, entries: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """`user=NAME|NAME` entries read: user -> the names, upper case (a user listed twice gets
    both entries' names). ValueError for an entry that does not read."""
    bound: dict[str, frozenset[str]] = {}
    for entry in entries:
        user, _, listed = entry.partition("=")
        names = frozenset(a.strip().upper() for a in listed.split("|") if a.strip())
        if not user.strip() or not names:
            raise ValueError(f"{entry!r} is not user={what} or user={what}|{what}|...")
        bound[user.strip()] = bound.get(user.strip(), frozenset()) | names
    return bound
