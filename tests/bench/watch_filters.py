"""Filtered watch streams during registration churn: the heartbeat probe and the churn's pace.

Usage (from the worktree whose `registry` is measured):
    python -m tests.bench.watch_filters [--streams 300] [--names 100] [--filters distinct|same]
        [--seconds 6] [--workers 8] [--pyspy OUT.txt]
In a worktree of a commit older than this file, run it by its path with PYTHONPATH=. instead.

Starts a server process (credentials on, no store, no fetch limit), opens `streams` watch
streams in a process of their own, each filtering `names` of 200 applications (the same ones
for every stream with `--filters same`), then for `seconds` has `workers` clients register
and cancel instances across those applications while a probe heartbeats one instance every
10 ms. Prints one JSON line: the probe's round trips (p50, p99, max), the churn's changes a
second, the events the streams received, and the fan-out's rounds and their mean time from a
change to its last write (`registry_watch_fanout_seconds`). `--pyspy` records the server with
py-spy meanwhile (raw, for a flame graph). The figures in docs/operations.md ("Watch streams")
are medians of three runs of each case, alternated with the same runs on the base.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.helpers import instance_doc
from tests.processes import ServerProcess

CREDENTIAL = "svc:s3cret"
AUTH = {"Authorization": "Basic " + base64.b64encode(CREDENTIAL.encode()).decode()}
APPS = [f"CHURN-{n:03}" for n in range(200)]
PROBE_INTERVAL = 0.01
WARM = 1.0  # seconds of probing before the churn starts


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = {
        "store__enabled": "false",
        "limits__fetch_rate_limit": "0",
        "credentials__clients": CREDENTIAL,
        "logging__level": "warning",
    }
    server = ServerProcess(Path(tempfile.mkdtemp()) / "server.log", settings=settings)
    await server.start()
    eureka = server.eureka
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )
    readers = None
    try:
        doc = {"instance": instance_doc("PROBE", "p-1")}
        async with session.post(eureka + "apps/PROBE", json=doc, headers=AUTH) as r:
            assert 204 == r.status, r.status
        if args.streams:
            readers = await asyncio.create_subprocess_exec(
                *[sys.executable, __file__, "--readers", eureka],
                *["--streams", str(args.streams), "--names", str(args.names)],
                *["--filters", args.filters],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert readers.stdout is not None and readers.stdin is not None
            assert b"ready" == (await asyncio.wait_for(readers.stdout.readline(), 60)).strip()
        done = asyncio.Event()
        latencies: list[float] = []
        made = 0

        async def probe() -> None:
            url = eureka + "apps/PROBE/p-1"
            while not done.is_set():
                started = time.perf_counter()
                async with session.put(url, headers=AUTH) as r:
                    assert 200 == r.status
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(PROBE_INTERVAL)

        async def churn(worker: int) -> None:
            nonlocal made
            headers = AUTH | {"Content-Type": "application/json"}
            n = 0
            while not done.is_set():
                app, iid = APPS[(worker * 7919 + n) % len(APPS)], f"c-{worker}-{n}"
                body = orjson.dumps({"instance": instance_doc(app, iid)})
                url = eureka + f"apps/{app}"
                async with session.post(url, data=body, headers=headers) as r:
                    assert 204 == r.status, r.status
                async with session.delete(f"{url}/{iid}", headers=headers) as r:
                    assert 200 == r.status, r.status
                made += 2
                n += 1

        spy = None
        if args.pyspy:
            record = ["py-spy", "record", "-p", str(server.pid), "-o", args.pyspy, "-f", "raw"]
            spy = subprocess.Popen(
                [*record, "-d", str(int(args.seconds)), "-r", "200", "--nonblocking"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        probing = asyncio.ensure_future(probe())
        await asyncio.sleep(WARM)
        latencies.clear()
        workers = [asyncio.ensure_future(churn(w)) for w in range(args.workers)]
        started = time.perf_counter()
        await asyncio.sleep(args.seconds)
        done.set()
        elapsed = time.perf_counter() - started
        await asyncio.gather(*workers, probing)
        if spy is not None:
            await asyncio.to_thread(spy.wait)
        received = 0
        if readers is not None:
            assert readers.stdin is not None and readers.stdout is not None
            readers.stdin.close()
            received = int((await readers.stdout.readline()).strip())
            await readers.wait()
        rounds, mean = await _fanout(session, server.base)
        ordered = sorted(latencies)
        return {
            "streams": args.streams,
            "filters": args.filters,
            "probe_p50_ms": round(statistics.median(ordered) * 1000, 2),
            "probe_p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
            "probe_max_ms": round(ordered[-1] * 1000, 2),
            "probes": len(ordered),
            "churn_changes_s": round(made / elapsed),
            "events_received": received,
            "fanout_rounds": rounds,
            "fanout_mean_ms": mean,
        }
    finally:
        if readers is not None and readers.returncode is None:
            readers.kill()
            await readers.wait()
        await session.close()
        await server.stop()


async def _fanout(session: aiohttp.ClientSession, base: str) -> tuple[float, float | None]:
    """The fan-out's rounds so far, and their mean time from a change to its last write."""
    async with session.get(base + "/metrics", headers=AUTH) as r:
        text = await r.text()
    values = {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if name.startswith("registry_watch_fanout_seconds_")
    }
    count = values.get("registry_watch_fanout_seconds_count", 0.0)
    total = values.get("registry_watch_fanout_seconds_sum", 0.0)
    return count, round(1000 * total / count, 1) if count else None


async def read_streams(args: argparse.Namespace) -> None:
    """The readers' process: open the streams, say `ready`, count the events they receive
    until stdin closes, and print that count."""
    rng = random.Random(7)
    same = rng.sample(APPS, args.names)
    received, counting = 0, False
    opened: asyncio.Semaphore = asyncio.Semaphore(0)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )

    async def stream() -> None:
        nonlocal received
        names = same if args.filters == "same" else rng.sample(APPS, args.names)
        url = args.readers + "watch?apps=" + ",".join(names)
        async with session.get(url, headers=AUTH) as r:
            assert 200 == r.status, (r.status, await r.text())
            first = True
            async for chunk in r.content.iter_any():
                if first:
                    opened.release()
                    first = False
                if counting:
                    received += chunk.count(b"\nevent: ")

    tasks = [asyncio.ensure_future(stream()) for _ in range(args.streams)]
    for _ in range(args.streams):
        await asyncio.wait_for(opened.acquire(), 30)
    counting = True
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    print(received, flush=True)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--names", type=int, default=100)
    parser.add_argument("--filters", choices=("distinct", "same"), default="distinct")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--pyspy", default="", help="record the server with py-spy to this file")
    parser.add_argument("--readers", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.readers:
        asyncio.run(read_streams(args))
    else:
        print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
