"""The log set-up: what an error's log line carries, in a process of its own (structlog's
configuration is global)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from tests.helpers import free_port

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


def test_aiohttps_own_records_are_json_and_an_undrained_bad_body_is_no_error(tmp_path):
    """A GET carrying a deflate body that cannot be decoded: the handler answers without
    reading it, aiohttp fails to drain it and logs that through the standard library. Every
    line stays JSON, and that record (no fault of the server) is left out."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env |= {"REGISTRY_STORE": "false", "REGISTRY_LOG_FORMAT": "json"}
    server = subprocess.Popen(
        [sys.executable, "-m", "registry", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    body = b"not deflate at all"
                    sock.sendall(
                        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Encoding: deflate\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    assert sock.recv(100).startswith(b"HTTP/1.1 200")
                    time.sleep(0.2)  # aiohttp drains the body after the answer
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.05)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    lines = [json.loads(line) for line in stderr.splitlines()]  # each one JSON
    assert [] == [e for e in lines if e["level"] in ("error", "critical")]
    assert "server_stopped" == lines[-1]["event"]
