"""A reverse proxy on loopback that serves a registry under a path prefix, as an operator's
ingress does (`https://ops.example.com/registry/` -> the registry's `/`): requests below the
prefix are forwarded with the prefix taken off and `X-Forwarded-Prefix` set, and answers are
streamed back as they come (a watch stream's events included)."""

from __future__ import annotations

import aiohttp
from aiohttp import web

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


def prefix_proxy(upstream: str, prefix: str, session: aiohttp.ClientSession) -> web.Application:
    """An application forwarding `prefix` + path to `upstream` + path (`prefix` without its
    trailing slash: `/registry`)."""

    async def forward(request: web.Request) -> web.StreamResponse:
        tail = request.path_qs[len(prefix) :] or "/"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["X-Forwarded-Prefix"] = prefix
        body = await request.read()
        async with session.request(
            request.method, upstream + tail, headers=headers, data=body or None
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-encoding":
                    response.headers[key] = value
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", prefix + "{tail:.*}", forward)
    return app
