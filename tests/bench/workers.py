"""The workers scenario: what a second registry process on the same host would buy.

A `serve --workers 2` would share one port between two processes (SO_REUSEPORT, the kernel
spreading connections between them) and keep both registries whole by making the workers
peers of each other over loopback: each heartbeat is then handled by the worker it reached
and applied again, as a replication, by the other. That is modelled here without building
it: two peered nodes on ports of their own, each loaded with half the connections at once,
beside one node with all of them, runs alternating. Throughput is the two nodes' sum; the CPU
is both processes' own per heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from tests.bench import processes, workloads
from tests.bench.load import LoadGenerator, Result
from tests.bench.scenarios import (
    REPLICA_TIMEOUT,
    Plan,
    Series,
    _drained,
    _registry_size,
    compared,
)


async def workers(plan: Plan) -> dict[str, Any]:
    n = plan.instances
    half = LoadGenerator(
        connections=max(1, plan.load.connections // 2), prefer_wrk=plan.load.wrk is not None
    )
    beat = workloads.heartbeats(n)
    spec = {"kind": "heartbeat", "instances": n}
    async with (
        processes.cluster(2, leases__eviction_interval=3600) as pair,
        processes.registry(leases__eviction_interval=3600) as alone,
    ):
        await processes.populate(pair[0], n)
        await processes.populate(alone, n)
        async with aiohttp.ClientSession() as session:
            started = time.monotonic()
            while await _registry_size(session, pair[1]) < n:
                if time.monotonic() - started > REPLICA_TIMEOUT:
                    raise RuntimeError(f"the second worker did not hold {n} instances")
                await asyncio.sleep(processes.POLL)
            two, one = Series(), Series()
            if plan.warm_up:
                await plan.load.run(alone.url, beat, 1, spec)
                await asyncio.gather(*(half.run(w.url, beat, 1, spec) for w in pair))
            for run in range(plan.runs):
                for side in ("two", "one") if run % 2 == 0 else ("one", "two"):
                    if side == "one":
                        before = alone.cpu_seconds()
                        result = await plan.load.run(alone.url, beat, plan.seconds, spec)
                        one.results.append(result)
                        one.cpu_us_per_request.append(_per(alone.cpu_seconds() - before, result))
                        continue
                    before = sum(w.cpu_seconds() for w in pair)
                    halves = await asyncio.gather(
                        *(half.run(w.url, beat, plan.seconds, spec) for w in pair)
                    )
                    for worker in pair:  # the replication the run caused, counted in it
                        await _drained(session, worker)
                    result = _together(halves)
                    two.results.append(result)
                    two.cpu_us_per_request.append(
                        _per(sum(w.cpu_seconds() for w in pair) - before, result)
                    )
    figures = compared(two, one)
    return {
        "two_workers": figures["registry"],
        "one_worker": figures["ceiling"],
        "ratio": figures["ratio"],  # two workers' heartbeats / one's
        "cpu_ratio": figures["cpu_ratio"],  # one's CPU per heartbeat / two's (both processes)
        "instances": n,
    }


def _together(halves: list[Result]) -> Result:
    """Two load generators' results as one: requests added, the slower latencies."""
    return Result(
        requests=sum(r.requests for r in halves),
        seconds=max(r.seconds for r in halves),
        errors=sum(r.errors for r in halves),
        non_2xx=sum(r.non_2xx for r in halves),
        p50_ms=max(r.p50_ms for r in halves),
        p99_ms=max(r.p99_ms for r in halves),
    )


def _per(cpu_seconds: float, result: Result) -> float:
    return 1e6 * cpu_seconds / result.requests if result.requests else 0.0
