"""Sending a document in its pieces: whole and in order, on uvloop's transport (one writev)
and on asyncio's (joined into large writes), however slowly the client reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from aiohttp import web

from registry.http.negotiation import Pieces


def _loops() -> list[Callable[[], asyncio.AbstractEventLoop]]:
    try:
        import uvloop
    except ImportError:  # the `fast` extra is not installed: asyncio's loop only
        return [asyncio.new_event_loop]
    return [asyncio.new_event_loop, uvloop.new_event_loop]


# 3 MB in 600 pieces, bytes and memoryviews, each its own content: far more than a socket
# buffer takes, so the transport queues most of it and pauses the writer.
PIECES: list[bytes | memoryview] = [
    bytes([n % 251]) * (n * 17 % 9_000 + 1) if n % 3 else memoryview(bytes([n % 253]) * 6_000)[1:]
    for n in range(600)
]


async def _served_and_read(*, slowly: bool) -> tuple[int, int | None, bytes, bytes]:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=Pieces(PIECES, "application/octet-stream"))

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # twice on one kept-alive connection: nothing left over
                async with session.get(f"http://127.0.0.1:{port}/") as response:
                    body = bytearray()
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        body += chunk
                        if slowly:
                            await asyncio.sleep(0.001)
                    length = response.content_length
            async with session.get(f"http://127.0.0.1:{port}/") as response:
                again = await response.read()
        return response.status, length, bytes(body), again
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__.split(".")[0])
@pytest.mark.parametrize("slowly", [False, True], ids=["reading", "reading slowly"])
def test_pieces_arrive_whole_and_in_order(new_loop, slowly):
    whole = b"".join(PIECES)
    with asyncio.Runner(loop_factory=new_loop) as runner:
        status, length, body, again = runner.run(_served_and_read(slowly=slowly))
    assert (200, len(whole)) == (status, length)
    assert whole == body
    assert whole == again
