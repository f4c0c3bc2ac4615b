"""429 for a client that fetches faster than its bucket allows (registry/http/ratelimit.py).

Peers are never throttled: anti-entropy pulls many applications at once, and a refused pull
leaves a node short of instances for a whole round. A peer's call carries the replication
header, which the guard (checked before this) lets through only with the peer credential
when credentials are configured.
"""

from __future__ import annotations

from aiohttp import web

from registry.common.clock import Clock
from registry.errors import TooManyRequests
from registry.http.answering import Check
from registry.http.params import is_replication
from registry.http.ratelimit import FetchLimiter, client_key, retry_after


def limited(limiter: FetchLimiter, clock: Clock) -> Check:
    """The check that refuses a client over its fetch rate."""

    def check(request: web.Request) -> None:
        if is_replication(request):
            return
        key = client_key(request.remote)
        wait = limiter.wait(key, clock.monotonic())
        if wait:
            raise TooManyRequests(
                f"{key} fetches more than {limiter.rate:g} times a second "
                f"(bursts of {limiter.burst}); retry after {wait:.1f} s",
                retry_after=retry_after(wait),
            )

    return check
