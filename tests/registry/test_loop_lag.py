"""The loop-lag monitor's tally: a histogram, the longest since start and the recent longest."""

from __future__ import annotations

import asyncio

from registry.loop_lag import BOUNDS, WINDOW, LoopLag


class TestRecord:
    def test_each_lateness_lands_in_its_bucket(self):
        lag = LoopLag()
        lag.record(0.0005, now=100.0)
        lag.record(0.03, now=100.5)
        lag.record(9.0, now=101.0)
        assert 1 == lag.buckets[0]
        assert 1 == lag.buckets[BOUNDS.index(0.05)]
        assert 1 == lag.buckets[-1]
        assert 3 == lag.count
        assert 9.0 == lag.longest

    def test_the_recent_maximum_forgets_what_is_older_than_the_window(self):
        lag = LoopLag()
        lag.record(0.5, now=100.2)
        lag.record(0.01, now=105.0)
        assert 0.5 == lag.recent_max(now=105.0)
        assert 0.01 == lag.recent_max(now=100.0 + WINDOW + 1)
        assert 0.0 == lag.recent_max(now=200.0)
        assert 0.5 == lag.longest


async def test_a_blocked_loop_is_seen_late():
    """A callback held up by blocking work is recorded as late by about as long."""
    lag = LoopLag(interval=0.001)
    lag.start()
    await asyncio.sleep(0.005)
    busy_until = asyncio.get_running_loop().time() + 0.05
    while asyncio.get_running_loop().time() < busy_until:  # blocks the loop on purpose
        pass
    await asyncio.sleep(0.005)
    lag.stop()
    assert lag.longest >= 0.04
