"""The log set-up: what an error's log line carries, in a process of its own (structlog's
configuration is global)."""

from __future__ import annotations

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
