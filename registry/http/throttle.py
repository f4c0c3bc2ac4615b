"""429 for a client that fetches faster than its bucket allows (registry/ratelimit.py)."""

from __future__ import annotations

import functools

from aiohttp import web
from aiohttp.typedefs import Handler

from registry.clock import Clock
from registry.errors import TooManyRequests
from registry.ratelimit import FetchLimiter, client_key, retry_after


def limited(handler: Handler, limiter: FetchLimiter, clock: Clock) -> Handler:
    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        key = client_key(request.remote)
        wait = limiter.wait(key, clock.monotonic())
        if wait:
            raise TooManyRequests(
                f"{key} fetches more than {limiter.rate:g} times a second "
                f"(bursts of {limiter.burst}); retry after {wait:.1f} s",
                retry_after=retry_after(wait),
            )
        return await handler(request)

    return wrapper
