"""The process's server (registry/serving.py), on real sockets: what aiohttp's parser refuses
is answered with the JSON error body every other refusal has, a long-poll or a watch stream
is let go as soon as its client has gone, and connections are capped by address and given a
deadline for their request heads (registry/http/connections.py)."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator, Iterator

import orjson
import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from registry import Settings, create_app
from registry.appkeys import CONNECTIONS, FEED
from registry.http.connections import raise_file_limit
from registry.serving import Runner
from tests.helpers import eventually, free_port

MANY_HEADERS = b"".join(b"X-%d: y\r\n" % n for n in range(40_000))


@pytest.fixture
def settings() -> Settings:
    return Settings.of(store__enabled=False)


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[tuple[int, web.Application]]:
    app = create_app(settings)
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


METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "CONNECT"]


@pytest.mark.parametrize(
    ("method", "target"),
    [(m, path) for m in METHODS for path in ("/eureka/no-such-thing", "/eureka/apps")]
    + [("CONNECT", "127.0.0.1:1")],  # the authority form, CONNECT's own
)
async def test_a_body_never_becomes_the_next_request(port, method, target):
    """Whatever the method and target, a request with a body is answered in JSON, and its
    body is drained or its connection closed: it is never read as a request of its own (a
    request smuggled behind a proxy that reuses connections). CONNECT is refused outright."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n".encode()
            + b"{}"
            + GET_STATUS
        )
        answers = []
        while len(answers) < 2:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            except asyncio.IncompleteReadError:
                break  # closed after the first answer
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            answers.append((head.split(b"\r\n")[0].split()[1], head, body))
    finally:
        writer.close()
    status, head, body = answers[0]
    assert b"application/json" in head, head
    assert "error" in orjson.loads(body) or status.startswith(b"2"), body
    assert all(status != b"400" for status, _, _ in answers[1:]), answers
    if method == "CONNECT":
        assert (b"405", 1) == (status, len(answers))
    elif len(answers) == 2:  # drained: the next request on the connection is itself
        assert answers[1][0] == b"200", answers[1]


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


# Connections ------------------------------------------------------------------------------------

GET_STATUS = b"GET /eureka/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"


async def closed(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds (sending nothing)."""
    try:
        return b"" == await asyncio.wait_for(reader.read(1), within)
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


async def status_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(GET_STATUS)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    return head.split(b"\r\n")[0]


class TestConnections:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            store__enabled=False,
            limits__max_connections_per_address=3,
            limits__request_head_timeout=0.3,
        )

    async def test_an_address_over_its_cap_is_closed_as_it_connects(self, served):
        port, app = served
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for reader, writer in held:
            assert b"HTTP/1.1 200 OK" == await status_on(reader, writer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed(reader, within=1)
        counted = app[CONNECTIONS]
        await eventually(lambda: (counted.total, counted.refused), lambda n: n == (3, 1))
        held[0][1].close()
        await eventually(lambda: counted.total, lambda n: n == 2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b"HTTP/1.1 200 OK" == await status_on(reader, writer)  # room again
        for _, w in [*held[1:], (reader, writer)]:
            w.close()

    async def test_a_connection_sending_no_request_head_in_time_is_closed(self, served):
        port, app = served
        silent, _ = await asyncio.open_connection("127.0.0.1", port)
        partial, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /eureka/status HTTP/1.1\r\nHost: 127.0")  # and no more
        assert await closed(silent, within=2)
        assert await closed(partial, within=2)
        counted = app[CONNECTIONS]
        await eventually(lambda: (counted.total, counted.timed_out), lambda n: n == (0, 2))

    async def test_a_kept_alive_connection_waits_between_requests(self, port):
        """The head's deadline runs from a request's first byte, not from the last answer:
        a client that heartbeats every 30 s keeps its connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b"HTTP/1.1 200 OK" == await status_on(reader, writer)
        assert not await closed(reader, within=0.8)
        assert b"HTTP/1.1 200 OK" == await status_on(reader, writer)
        writer.close()

    def test_the_handler_still_has_what_the_connection_reads(self):
        """`_Connection` reads three of aiohttp's attributes: a release that renames them must
        fail here rather than leave connections without their deadline."""
        handler = RequestHandler.__new__(RequestHandler)
        for name in ("_request_count", "_current_request", "_messages"):
            assert name in RequestHandler.__slots__ or hasattr(handler, name), name


@pytest.fixture
def file_limit() -> Iterator[tuple[int, int]]:
    """The soft limit lowered for the test, put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
    try:
        yield min(soft, 256), hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_file_limit_is_raised_to_what_the_system_allows(file_limit):
    lowered, hard = file_limit
    before, after = raise_file_limit()
    assert lowered == before
    assert after == (hard if hard != resource.RLIM_INFINITY else max(lowered, 1 << 20))
    assert after == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
