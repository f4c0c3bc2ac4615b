"""The Python load generator, for machines without wrk: same workloads, one JSON line out.

Run as a separate process by the runner (`python -m tests.bench.pyload SPEC_JSON`), so the
server under test never shares a process or an event loop with its load.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp

from tests.bench import workloads


def workload_from(spec: dict[str, object]) -> workloads.Workload:
    kind = spec["kind"]
    if kind == "heartbeat":
        return workloads.heartbeats(int(spec["instances"]))  # type: ignore[call-overload]
    if kind == "churn":
        return workloads.churn()
    return workloads.gets(str(spec["path"]), dict(spec["headers"]), str(kind))  # type: ignore[call-overload]


async def run(
    url: str, workload: workloads.Workload, seconds: float, connections: int, delay_ms: float = 0
) -> dict:
    """Requests from `connections` workers for `seconds`, each worker pausing `delay_ms` first."""
    latencies: list[float] = []
    errors = non_2xx = 0
    counter = 0
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal counter, errors, non_2xx
        while time.monotonic() < deadline:
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            method, path, body = workload.next_request(counter)
            counter += 1
            started = time.perf_counter()
            try:
                async with session.request(
                    method, url + path, data=body, headers=workload.headers, compress=None
                ) as response:
                    await response.read()
                    if response.status >= 300:
                        non_2xx += 1
            except aiohttp.ClientError:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=connections)
    began = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    elapsed = time.monotonic() - began
    latencies.sort()

    def percentile(p: float) -> float:
        return (
            1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else 0.0
        )

    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "errors": errors + non_2xx,
        "non_2xx": non_2xx,
        "p50_ms": percentile(0.50),
        "p99_ms": percentile(0.99),
    }


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    result = asyncio.run(
        run(
            str(spec["url"]),
            workload_from(spec),
            float(spec["seconds"]),
            int(spec["connections"]),
            float(spec.get("delay_ms", 0)),
        )
    )
    print(json.dumps(result))
