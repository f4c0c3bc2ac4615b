"""A peer's signed request checked (registry/codec/peer_signature.py says what is signed).

A signature passes when it was made with our peer credential's key for this request's method,
`Host` and path, its time is within `leases.max_clock_skew` of this node's clock, its nonce has not
been seen within that window, and the `Host` it was signed for is this node's: a name (DNS
peers are named by address, so a name is one the operator configured), the address and port
the connection arrived on, or `my_url`'s. A listener a DNS answer chose could otherwise pass
a signed request meant for it on to a real node within the window: signed for its own
address, that request is refused here. The body's digest is checked where the body is read
(registry/http/request_body.py): a handler that reads none applies none.

The nonces seen are kept until their window ends, at most MAX_NONCES; beyond, a signed
request is answered 429 with Retry-After (the sender backs off): only requests whose
signature holds are remembered, so only the peers themselves can fill it.
"""

from __future__ import annotations

import heapq
import ipaddress
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from registry.codec.peer_signature import parse, verifies
from registry.common.clock import Clock
from registry.errors import TooManyRequests, Unauthorized
from registry.http.request_body import SIGNED_BODY

# Nonces remembered at once: ~200 bytes each, 20 MB at most; 166 signed requests a second,
# sustained over a 10-minute window (the default skew, both ways), before any is refused.
MAX_NONCES = 100_000


class PeerSignatures:
    def __init__(self, clock: Clock, *, window: float, my_url: str = "") -> None:
        self._clock = clock
        self._window_ms = round(window * 1000)
        self._my_host = urlsplit(my_url).netloc.lower() if my_url else ""
        self._seen: set[str] = set()
        self._expiries: list[tuple[int, str]] = []  # (when a nonce may be forgotten, nonce)

    def check(self, request: web.Request, key: bytes, value: str) -> None:
        """Let the request through as a peer's, or raise Unauthorized saying why (429 when
        too many nonces are held). `value`: the Authorization header after its scheme."""
        signed = parse(value)
        if signed is None:
            raise _refused("the Registry-Peer signature is malformed")
        now_ms = self._clock.wall_ms()
        if abs(now_ms - signed.ts_ms) > self._window_ms:
            raise _refused(
                f"the Registry-Peer signature is {abs(now_ms - signed.ts_ms) / 1000:.0f} s from "
                f"this node's clock (leases.max_clock_skew: {self._window_ms / 1000:g} s)"
            )
        host = request.headers.get(hdrs.HOST, "")
        target = request.raw_path
        if not verifies(key, signed, method=request.method, host=host, target=target):
            raise _refused(
                "the Registry-Peer signature does not hold: another credentials.peer, or a "
                "request changed on its way"
            )
        if not self._addressed_here(request, host):
            raise _refused(f"the request was signed for another node ({host[:64]!r})")
        self._forget(now_ms)
        if signed.nonce in self._seen:
            raise _refused("the Registry-Peer signature was used before (a replay)")
        if len(self._seen) >= MAX_NONCES:
            raise TooManyRequests(
                "too many signed peer requests within leases.max_clock_skew", retry_after="1"
            )
        self._seen.add(signed.nonce)
        heapq.heappush(self._expiries, (signed.ts_ms + self._window_ms, signed.nonce))
        request[SIGNED_BODY] = signed.body

    def _forget(self, now_ms: int) -> None:
        """Drop the nonces whose signatures are out of the window by now: a replay of one is
        refused for its time."""
        expiries = self._expiries
        while expiries and expiries[0][0] < now_ms:
            self._seen.discard(heapq.heappop(expiries)[1])

    def _addressed_here(self, request: web.Request, host: str) -> bool:
        name, port = _split(host)
        try:
            address = _unmapped(ipaddress.ip_address(name))
        except ValueError:
            return bool(name)  # a name: the operator's (peers from DNS are named by address)
        if self._my_host and host.lower() == self._my_host:
            return True
        local = request.transport.get_extra_info("sockname") if request.transport else None
        if not isinstance(local, tuple) or len(local) < 2:
            return False
        try:
            here = _unmapped(ipaddress.ip_address(str(local[0]).partition("%")[0]))
        except ValueError:
            return False
        return address == here and (port or 80) == local[1]


def _split(host: str) -> tuple[str, int | None]:
    """`Host` as (host, port): `[::1]:8761`, `10.0.0.5:8761`, `name`."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        name, port = host.split(":")
    else:
        name, port = host, ""
    return name, int(port) if port.isascii() and port.isdecimal() and len(port) <= 5 else None


def _unmapped(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _refused(detail: str) -> Unauthorized:
    return Unauthorized(detail, challenges=['Registry-Peer realm="service-registry"'])
