"""The log set-up: what an error's log line carries, in a process of its own (structlog's
configuration is global)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

LOGS_AN_ERROR = """
import structlog
from registry.logs import configure

configure(fmt="json")
item = {"instanceInfo": "SECRET-LOOKING BODY"}
try:
    raise ValueError("bad item")
except ValueError:
    structlog.get_logger().exception("replication_item_failed")
"""


def test_a_traceback_is_logged_without_the_frames_locals():
    """The locals of a failing frame hold whole request bodies: they stay out of the log."""
    done = subprocess.run(
        [sys.executable, "-c", LOGS_AN_ERROR], capture_output=True, text=True, timeout=30
    )
    (line,) = done.stderr.splitlines()
    logged = json.loads(line)
    assert "replication_item_failed" == logged["event"]
    assert "ValueError" == logged["exception"][0]["exc_type"]
    assert "SECRET-LOOKING BODY" not in line


async def test_aiohttps_own_records_are_json_and_an_undrained_bad_body_is_no_error(servers):
    """A GET carrying a deflate body that cannot be decoded: the handler answers without
    reading it, aiohttp fails to drain it and logs that through the standard library. Every
    line stays JSON, and that record (no fault of the server) is left out."""
    server = await servers.start(store__enabled="false", logging__format="json")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = b"not deflate at all"
    writer.write(
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Encoding: deflate\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    answer = b'{"alive":true}'
    assert (await asyncio.wait_for(reader.readuntil(answer), 10)).startswith(b"HTTP/1.1 200")
    # aiohttp drains the body after the answer; a connection handles one request at a time,
    # so a second one answered means the first, its drain included, is over.
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert (await asyncio.wait_for(reader.readuntil(answer), 10)).startswith(b"HTTP/1.1 200")
    writer.close()
    assert 0 == await server.stop()
    lines = await server.log_lines()  # each one JSON
    assert [] == [e for e in lines if e["level"] in ("error", "critical")]
    assert "server_stopped" == lines[-1]["event"]
