"""Per-client token buckets for registry fetches: one client in a loop cannot starve the rest.

A client is its address (an IPv6 client by its /64, which one host can rotate addresses
within). Each has a bucket of `burst` tokens refilled at `rate` a second; a fetch takes one, and
a client with none left is told how long until it has one. Memory is bounded: past
`max_clients` the least recently seen client is forgotten, and comes back to a full bucket, as
it would have after an idle spell anyway. Heartbeats and registrations never come here.
"""

from __future__ import annotations

import ipaddress
import math

MAX_CLIENTS = 65_536


def client_key(address: str | None) -> str:
    """The bucket an address fetches from."""
    if not address or ":" not in address:
        return address or "unknown"
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:  # ::ffff:10.0.0.5, from a dual-stack socket
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))


class FetchLimiter:
    """The buckets of every client seen lately, and how many fetches they were refused."""

    def __init__(self, *, rate: float, burst: int, max_clients: int = MAX_CLIENTS) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self.throttled = 0  # fetches refused, for metrics
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at), oldest first

    def wait(self, key: str, now: float) -> float:
        """0 when `key` may fetch now (the fetch is counted); else seconds until it may."""
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
            self.throttled += 1
        self._buckets[key] = (tokens, now)  # re-inserted: the most recently seen is last
        if len(self._buckets) > self.max_clients:
            del self._buckets[next(iter(self._buckets))]
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after(wait: float) -> str:
    """The Retry-After header's whole seconds: rounded up, so a client that obeys gets in."""
    return str(max(1, math.ceil(wait)))
