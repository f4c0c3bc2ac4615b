"""The benchmark's verdicts judge only what can be judged (review F15): a ratio made by the
Python load generator is not judged, a series with errors is never "ok", and a refusal is no
throughput."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.__main__ import ratio_verdict
from tests.bench.load import Result


def side(rps: int, errors: int = 0) -> dict[str, Any]:
    return {"rps_median": rps, "errors": errors}


def figure(ratio: float, *, errors: int = 0) -> dict[str, Any]:
    return {"registry": side(9_000, errors), "ceiling": side(10_000), "ratio": ratio}


@pytest.mark.parametrize(
    ("ratio", "errors", "verdict"),
    [(0.95, 0, "ok"), (0.949, 0, "BELOW"), (0.99, 1, "ERRORS"), (0.5, 3, "ERRORS")],
)
def test_a_ratio_by_wrk_is_judged_and_errors_are_never_ok(ratio, errors, verdict):
    assert verdict == ratio_verdict(
        figure(ratio, errors=errors), 0.95, judged=True, load_generator="wrk"
    )


def test_errors_on_either_side_of_a_replication_figure_are_seen():
    replicating = {"replicating": side(9_000), "standalone": side(9_500, 2), "ratio": 0.95}
    assert "ERRORS" == ratio_verdict(replicating, 0.85, judged=True, load_generator="wrk")


def test_a_ratio_by_the_python_generator_or_a_smoke_run_is_not_judged():
    python = "python (aiohttp) fallback"
    assert "(python load: not judged)" == ratio_verdict(
        figure(1.0), 0.95, judged=True, load_generator=python
    )
    assert "(smoke: not judged)" == ratio_verdict(
        figure(1.0), 0.95, judged=False, load_generator="wrk"
    )


def test_refusals_are_no_throughput():
    answered = Result(requests=1_000, seconds=2.0, errors=0, non_2xx=0, p50_ms=1, p99_ms=2)
    refused = Result(requests=1_000, seconds=2.0, errors=400, non_2xx=400, p50_ms=1, p99_ms=2)
    assert (500.0, 300.0) == (answered.rps, refused.rps)
