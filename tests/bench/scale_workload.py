"""The scale scenario's mixed workload, and the server's event-loop lag meanwhile.

For a while, all at once: the probing process's heartbeats, REGISTRATIONS_PER_SECOND new
instances, DELTA_FETCHERS stock clients fetching the gzip JSON delta once a second, and one
fetching the full registry every FULL_INTERVAL, gzip JSON and XML in turn; the server's
event-loop lag is read from `/metrics` meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.bench import processes
from tests.bench.scale_clients import CONNECT_BATCH, machine_cpu_seconds, run_helper
from tests.bench.scale_requests import (
    FORMS,
    JSON_BODY,
    REQUEST_TIMEOUT,
    Sizes,
    Timings,
    new_session,
    registration,
)

REGISTRATIONS_PER_SECOND = 10
DELTA_FETCHERS = 30
FULL_INTERVAL = 5.0
LAG_FIRST_SAMPLE = 10.0  # seconds into the workload: the recent maximum covers 10 s
LAG_SAMPLE_INTERVAL = 5.0
WORKLOAD_LEAD = 3.0  # seconds for the probing process to start before the workload does
LAG_RECENT = "registry_event_loop_lag_recent_max_seconds"
LAG_MAX = "registry_event_loop_lag_max_seconds"
LAG_HISTOGRAM = "registry_event_loop_lag_seconds"
Until = float | Callable[[], float]  # an end in monotonic seconds, or what says it


# The mixed workload -------------------------------------------------------------------------


async def mixed_workload(
    server: processes.Server, sizes: Sizes, fresh: Iterator[int]
) -> dict[str, Any]:
    """Probes, registrations, delta and full fetches, all at once for `sizes.seconds` from
    WORKLOAD_LEAD on. Nothing new is sent after that; what is still out is waited for
    (REQUEST_TIMEOUT at most)."""
    deltas, registrations = Timings(), Timings()
    fulls = {"json+gzip": Timings(), "xml+gzip": Timings()}
    probe_spec = {"url": server.url, "instances": sizes.instances, "apps": sizes.apps}
    async with new_session(0) as session:
        await _warmed(session, server)
        start = time.monotonic() + WORKLOAD_LEAD
        end = start + sizes.seconds
        cpu, probed, lag, *_ = await asyncio.gather(
            _cpu_at(start, server),
            run_helper(
                "probe",
                {**probe_spec, "start": start, "end": end},
                WORKLOAD_LEAD + sizes.seconds + 2 * REQUEST_TIMEOUT,
            ),
            _loop_lag(session, server, start, end),
            _full_fetches(session, server, start, end, fulls),
            _registrations(session, server, sizes, fresh, start, end, registrations),
            *(
                _delta_fetches(session, server, start + i / DELTA_FETCHERS, end, deltas)
                for i in range(DELTA_FETCHERS)
            ),
        )
        elapsed = time.monotonic() - start
        used = [after - before for before, after in zip(cpu, _cpu(server), strict=True)]
    return {
        "probe": probed,
        "delta_json_gzip": deltas.summary(),
        "full": {name: t.summary() for name, t in fulls.items()},
        "registrations": registrations.summary(),
        "loop_lag": lag,
        # CPU seconds a second: the server's, and every process's on the machine
        "server_cpu_share": round(used[0] / elapsed, 2),
        "machine_cpu_share": round(used[1] / elapsed, 2),
        "runner_cpu_seconds": round(used[2], 2),  # this process's (the probe reports its own)
        "seconds_with_stragglers": round(elapsed, 1),
    }


async def _warmed(session: aiohttp.ClientSession, server: processes.Server) -> None:
    """CONNECT_BATCH connections opened, all at once (so none reuses another's), and kept:
    requests sent while the server stalls do not wait to be accepted, as the probe's do not."""
    health = [session.get(f"{server.url}/healthz") for _ in range(CONNECT_BATCH)]
    for response in await asyncio.gather(*health):
        response.release()


async def _cpu_at(start: float, server: processes.Server) -> tuple[float, float, float]:
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    return _cpu(server)


def _cpu(server: processes.Server) -> tuple[float, float, float]:
    """CPU seconds used so far by the server, by the whole machine, and by this process."""
    return server.cpu_seconds(), machine_cpu_seconds(), time.process_time()


async def _delta_fetches(
    session: aiohttp.ClientSession,
    server: processes.Server,
    first: float,
    end: Until,
    timings: Timings,
) -> None:
    """One stock client: the gzip JSON delta once a second."""

    async def fetch(_: int) -> None:
        url = f"{server.url}/eureka/apps/delta"
        await timings.request(session, "GET", url, headers=FORMS["json+gzip"])

    timings.skipped += await _every(1.0, first, end, fetch)


async def _full_fetches(
    session: aiohttp.ClientSession,
    server: processes.Server,
    start: float,
    end: float,
    timings: dict[str, Timings],
) -> None:
    """The full registry every FULL_INTERVAL, each of `timings`' forms in turn."""
    names = list(timings)

    async def fetch(tick: int) -> None:
        name = names[tick % len(names)]
        await timings[name].request(
            session, "GET", f"{server.url}/eureka/apps/", headers=FORMS[name]
        )

    skipped = await _every(FULL_INTERVAL, start, end, fetch)
    timings[names[0]].skipped += skipped  # either form: a skipped fetch was never sent


async def _registrations(
    session: aiohttp.ClientSession,
    server: processes.Server,
    sizes: Sizes,
    fresh: Iterator[int],
    start: float,
    end: float,
    timings: Timings,
) -> None:
    """REGISTRATIONS_PER_SECOND new instances, each sent when due whatever the others do."""
    sent: list[asyncio.Task[None]] = []

    async def send(_: int) -> None:
        path, body = registration(next(fresh), sizes.apps)
        request = timings.request(
            session, "POST", server.url + path, headers=JSON_BODY, data=body, expect=204
        )
        sent.append(asyncio.create_task(request))

    await _every(1 / REGISTRATIONS_PER_SECOND, start, end, send)
    await asyncio.gather(*sent)


async def _every(
    interval: float, first: float, end: Until, send: Callable[[int], Awaitable[None]]
) -> int:
    """`send(tick)` at `first`, then every `interval` until `end` (monotonic seconds, or what
    a callable says it is by then), each awaited before the next; how many fell due meanwhile
    and were skipped."""
    until = end if callable(end) else lambda: end
    due, tick, skipped = first, 0, 0
    while due < until():
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if due >= until():
            break
        await send(tick)
        tick += 1
        due += interval
        while due < min(until(), time.monotonic()):
            due += interval
            skipped += 1
    return skipped


# Event-loop lag -----------------------------------------------------------------------------


async def _loop_lag(
    session: aiohttp.ClientSession, server: processes.Server, start: float, end: float
) -> dict[str, Any]:
    """The longest event-loop lag in the workload, and the lag histogram's counts over it.

    The longest comes from the server's recent maximum, read every LAG_SAMPLE_INTERVAL from
    LAG_FIRST_SAMPLE in (or at the end of a shorter workload), and from its longest since
    the start, should that have grown meanwhile: a stalled server answers a scrape late, so
    scrapes due at different times may all be answered, with one reading, after the stall.
    None where the server has no such metric.
    """
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    before = await _lag_figures(session, server)
    samples: list[float | None] = []
    due = start + min(LAG_FIRST_SAMPLE, end - start)
    while due <= end + 1e-6:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        samples.append((await _lag_figures(session, server))["recent"])
        due += LAG_SAMPLE_INTERVAL
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    after = await _lag_figures(session, server)
    read = [s for s in samples if s is not None]
    if before["max"] is not None and after["max"] is not None and after["max"] > before["max"]:
        read.append(after["max"])  # the longest since the start came in the workload
    return {
        "recent_max_samples_ms": [None if s is None else round(1000 * s, 1) for s in samples],
        "longest_ms": round(1000 * max(read), 1) if read else None,
        "since_start_ms": None if after["max"] is None else round(1000 * after["max"], 1),
        "histogram": _bucket_counts(before["buckets"], after["buckets"]),
    }


async def _lag_figures(session: aiohttp.ClientSession, server: processes.Server) -> dict[str, Any]:
    """The lag metrics from one scrape of `/metrics` (each None when missing or unanswered)."""
    figures: dict[str, Any] = {"recent": None, "max": None, "buckets": None}
    try:
        async with session.get(f"{server.url}/metrics") as response:
            text = (await response.read()).decode()
    except (TimeoutError, aiohttp.ClientError):
        return figures
    for family in text_string_to_metric_families(text):
        if family.name == LAG_RECENT:
            figures["recent"] = family.samples[0].value
        elif family.name == LAG_MAX:
            figures["max"] = family.samples[0].value
        elif family.name == LAG_HISTOGRAM:
            figures["buckets"] = {
                s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")
            }
    return figures


def _bucket_counts(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, int] | None:
    """Lags counted between two scrapes, by bucket: each upper bound `le` (seconds) with the
    count above the bound before it (Prometheus' buckets are cumulative)."""
    if before is None or after is None:
        return None
    counts, below = {}, 0.0
    for le in sorted(after, key=float):
        cumulative = after[le] - before.get(le, 0.0)
        counts[le] = round(cumulative - below)
        below = cumulative
    return counts
