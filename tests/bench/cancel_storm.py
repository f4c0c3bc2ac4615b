"""A cancel storm: what it costs that a cancel's 200 waits for its commit to disk.

One server with its store on takes `COUNT` registrations, then `COUNT` cancels from
`CONNECTIONS` keep-alive connections at once; the cancels' throughput and latencies are
printed as JSON. Run it against two builds (one that commits before answering, one that
writes behind) to compare them:

    python -m tests.bench.cancel_storm [COUNT] [CONNECTIONS]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import orjson

from tests.bench import processes
from tests.helpers import instance_doc

JSON = {"Content-Type": "application/json"}


async def storm(count: int, connections: int) -> dict[str, float]:
    async with processes.registry() as server:
        base = f"{server.url}/eureka/apps/ORDERS"
        connector = aiohttp.TCPConnector(limit=connections)
        async with aiohttp.ClientSession(connector=connector) as session:
            ids = [f"i-{k}" for k in range(count)]

            async def each(work: list[str], send: Callable[[str], Awaitable[None]]) -> list[float]:
                timings = []
                for iid in work:
                    began = time.perf_counter()
                    await send(iid)
                    timings.append(time.perf_counter() - began)
                return timings

            async def register(iid: str) -> None:
                body = orjson.dumps({"instance": instance_doc("ORDERS", iid)})
                async with session.post(base, data=body, headers=JSON) as response:
                    assert response.status == 204, response.status

            async def cancel(iid: str) -> None:
                async with session.delete(f"{base}/{iid}") as response:
                    assert response.status == 200, response.status

            shares = [ids[k::connections] for k in range(connections)]
            await asyncio.gather(*(each(share, register) for share in shares))
            began = time.perf_counter()
            timings = await asyncio.gather(*(each(share, cancel) for share in shares))
            seconds = time.perf_counter() - began
    latencies = sorted(t for share in timings for t in share)
    return {
        "cancels": count,
        "connections": connections,
        "per_second": round(count / seconds),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    connections = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    print(orjson.dumps(asyncio.run(storm(count, connections))).decode())


if __name__ == "__main__":
    main()
