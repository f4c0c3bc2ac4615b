"""The loop-lag monitor's tally: a histogram, the longest since start and the recent longest."""

from __future__ import annotations

from registry.health.loop_lag import BOUNDS, WINDOW, LoopLag


class TestRecord:
    def test_each_lateness_lands_in_its_bucket(self):
        lag = LoopLag()
        lag.record(0.0005, now=100.0)
        lag.record(0.03, now=100.5)
        lag.record(9.0, now=101.0)
        assert 1 == lag.histogram.buckets[0]
        assert 1 == lag.histogram.buckets[BOUNDS.index(0.05)]
        assert 1 == lag.histogram.buckets[-1]
        assert 3 == lag.histogram.count
        assert 9.0 == lag.longest

    def test_the_recent_maximum_forgets_what_is_older_than_the_window(self):
        lag = LoopLag()
        lag.record(0.5, now=100.2)
        lag.record(0.01, now=105.0)
        assert 0.5 == lag.recent_max(now=105.0)
        assert 0.01 == lag.recent_max(now=100.0 + WINDOW + 1)
        assert 0.0 == lag.recent_max(now=200.0)
        assert 0.5 == lag.longest


class FakeLoop:
    """The two things the monitor asks of a loop, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 50.0
        self.due: list[float] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: object, *args: object) -> None:
        self.due.append(when)


def test_a_callback_run_late_is_recorded_by_how_late():
    """Due at 50.01 and run at 50.05: 40 ms late; the next look is due 10 ms after it ran."""
    loop = FakeLoop()
    lag = LoopLag(interval=0.01)
    lag._due = 50.01
    loop.now = 50.05
    lag._tick(loop)  # type: ignore[arg-type]
    assert abs(lag.longest - 0.04) < 1e-9
    assert 1 == lag.histogram.buckets[BOUNDS.index(0.05)]
    assert [50.06] == [round(when, 6) for when in loop.due]
