"""429 for a client that fetches faster than its bucket allows (registry/ratelimit.py)."""

from __future__ import annotations

import functools

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from registry.clock import Clock
from registry.http.error_handling import error_response
from registry.ratelimit import FetchLimiter, client_key, retry_after


def limited(handler: Handler, limiter: FetchLimiter, clock: Clock) -> Handler:
    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        key = client_key(request.remote)
        wait = limiter.wait(key, clock.monotonic())
        if wait:
            response = error_response(
                429,
                "too_many_requests",
                f"{key} fetches more than {limiter.rate:g} times a second "
                f"(bursts of {limiter.burst}); retry after {wait:.1f} s",
            )
            response.headers[hdrs.RETRY_AFTER] = retry_after(wait)
            return response
        return await handler(request)

    return wrapper
