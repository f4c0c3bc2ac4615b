"""Request counts and latencies by endpoint, method and status, for `/metrics`.

Tallied by hand rather than with prometheus-client's Histogram: its `labels()` lookup and lock
cost several microseconds a request, a measurable share of a heartbeat's. Here a request costs
two clock reads, one dict lookup and a bisect; prometheus-client still renders the histogram,
at scrape time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily

# Seconds. A heartbeat answers in well under a millisecond; long-polls and watch streams (which
# end when the client leaves) land in the last buckets.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0)


class RequestStats:
    def __init__(self) -> None:
        # (endpoint, method, status) -> counts per bucket (the last one: beyond them all), sum
        self._series: dict[tuple[str, str, int], tuple[list[int], list[float]]] = {}

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        key = (endpoint, method, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = ([0] * (len(BUCKETS) + 1), [0.0])
        series[0][bisect.bisect_left(BUCKETS, seconds)] += 1
        series[1][0] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "registry_http_request_duration_seconds",
            "HTTP requests answered, by endpoint, method and status, and how long they took",
            labels=["endpoint", "method", "status"],
        )
        for (endpoint, method, status), (counts, total) in sorted(self._series.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([endpoint, method, str(status)], buckets, total[0])
        yield family
