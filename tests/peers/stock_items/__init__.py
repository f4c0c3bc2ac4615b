"""Replication items a real stock Eureka server sent, and the tool that records them.

capture.py drives a stock node (a jar built from tests/bench/eureka_server, or from
eureka_1_10/ for the 1.10 line) through script.py's steps with recorder.py as its peer, and
writes one fixture per Eureka version here (eureka-<version>.json.gz); the replay test
(tests/peers/test_stock_items.py) reads them and needs no Java.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = sorted(Path(__file__).parent.glob("eureka-*.json.gz"))

__all__ = ["FIXTURES"]
