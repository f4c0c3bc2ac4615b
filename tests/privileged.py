"""Tests that need root: network namespaces (tests/fault/test_partitions.py), a tmpfs of a
test's own and the immutable attribute (tests/store/test_store_faults.py).

Where they cannot run they skip, saying why; where REQUIRE_ROOT_TESTS is set (`.ci/run` sets
it) they fail instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRED = "REQUIRE_ROOT_TESTS"


def unavailable(why: str) -> NoReturn:
    """Skip the test, or fail it where REQUIRE_ROOT_TESTS is set."""
    if os.environ.get(REQUIRED):
        pytest.fail(f"{REQUIRED} is set, but {why}")
    pytest.skip(why)
