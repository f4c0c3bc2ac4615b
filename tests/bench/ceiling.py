"""The ceiling: a bare aiohttp server on the same event loop type as the registry.

`PUT /eureka/apps/{app}/{id}` answers an empty 200, as a heartbeat does with no work behind it;
`GET /payload/{name}` answers precomputed bytes from a directory (files `name.body` and
`name.json` with the headers to send), as a fetch would with nothing but the bytes to return.

Usage: python -m tests.bench.ceiling PORT PAYLOAD_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aiohttp import web

from registry.__main__ import new_event_loop


def make_app(payload_dir: Path) -> web.Application:
    payloads: dict[str, tuple[bytes, dict[str, str]]] = {}
    for meta in payload_dir.glob("*.json"):
        body = meta.with_suffix(".body").read_bytes()
        payloads[meta.stem] = (body, json.loads(meta.read_text()))

    async def heartbeat(request: web.Request) -> web.Response:
        return web.Response()

    async def payload(request: web.Request) -> web.Response:
        body, headers = payloads[request.match_info["name"]]
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_put("/eureka/apps/{app}/{id}", heartbeat)
    app.router.add_get("/payload/{name}", payload)
    return app


if __name__ == "__main__":
    port, directory = int(sys.argv[1]), Path(sys.argv[2])
    web.run_app(
        make_app(directory),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        loop=new_event_loop(),
    )
