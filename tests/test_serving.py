"""The process's server (registry/serving.py), on real sockets: what aiohttp's parser refuses
is answered with the JSON error body every other refusal has, and a long-poll or a watch stream
is let go as soon as its client has gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from registry import Settings, create_app
from registry.appkeys import FEED
from registry.serving import Runner
from tests.helpers import eventually, free_port

MANY_HEADERS = b"".join(b"X-%d: y\r\n" % n for n in range(40_000))


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, web.Application]]:
    app = create_app(Settings(store=False))
    runner = Runner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port, app
    finally:
        await runner.cleanup()


@pytest.fixture
def port(served: tuple[int, web.Application]) -> int:
    return served[0]


async def answer(port: int, request: bytes) -> tuple[int, str, dict[str, str]]:
    """Send raw bytes; the status, content type and JSON body of the answer (read up to its
    length: the server closes the connection after it, unread bytes and all)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        status_line, *lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines if line)
        body = await reader.readexactly(int(headers["Content-Length"]))
    finally:
        writer.close()
    return int(status_line.split()[1]), headers["Content-Type"], orjson.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "said"),
    [
        (b"GET /eureka/apps HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9_000 + b"\r\n\r\n", "8190"),
        (b"GET /eureka/apps HTTP/1.1\r\nHost: x\r\n" + MANY_HEADERS + b"\r\n", "Too many"),
        (b"NOT HTTP AT ALL\r\n\r\n", "method"),
    ],
    ids=["header-too-long", "too-many-headers", "not-http"],
)
async def test_what_the_parser_refuses_gets_a_json_error(port, request_bytes, said):
    status, content_type, body = await answer(port, request_bytes)
    assert (400, "application/json") == (status, content_type.split(";")[0])
    assert "unreadable_request" == body["error"]
    assert said.lower() in body["detail"].lower()


@pytest.mark.parametrize(
    ("path", "held"),
    [
        ("/eureka/apps/delta?index=0&wait=5m", lambda feed: feed.polls),
        ("/eureka/watch", lambda feed: feed.watchers),
    ],
    ids=["long-poll", "watch"],
)
async def test_a_wait_is_let_go_when_its_client_goes(served, path, held):
    """Held while the client waits; let go within a second of the connection closing, not
    at the end of its wait (5 minutes) or the next keepalive (15 s)."""
    port, app = served
    feed = app[FEED]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n".encode()
    )
    await eventually(lambda: held(feed), lambda n: n == 1, timeout=5, what="held")
    writer.close()
    await eventually(lambda: held(feed), lambda n: n == 0, timeout=1, what="let go")
