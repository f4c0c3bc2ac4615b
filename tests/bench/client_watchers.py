"""DiscoveryClients watching one registry, in a process of their own (the `client` scenario).

Usage: python -m tests.bench.client_watchers SPEC_JSON

Starts `clients` pure discovery clients (`register=False`), `starting` at a time, against
`url`, and prints `ready` once each keeps its copy by the watch stream. From the `go` line on
stdin (the runner's other observers are ready too) it notes when each client's `changes()`
first hands it an ADDED for each of the `expected` instance ids. When all have seen all, or
`seconds` after `go`, and once the runner has closed stdin, it writes to the file `out` as
JSON each id's sighting times, one per client (`time.monotonic()`: one clock for the whole
machine, so the runner can subtract its send times), the clients' counters summed, and the
garbage collections meanwhile.

What the figure includes: the server's fan-out to every stream, and here each client's parsing,
merging, hash check and hand-over to its iterator, all clients of this process taking turns on
one event loop: the last to see a change has also waited for the others in its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from registry.__main__ import new_event_loop
from registry.client import Changes, DiscoveryClient
from registry.logs import configure
from tests.bench.gc_pauses import collections
from tests.bench.watchers import raise_fd_limit

READY_POLL = 0.01
READY_TIMEOUT = 60.0  # for every client of the process to be watching

Sightings = dict[str, list[float]]  # instance id: when each client first saw it


async def sightings(changes: Changes, seen: Sightings, expected: set[str]) -> None:
    """Timestamp each expected id's ADDED as this client's iterator hands it over."""
    missing = set(expected)
    async for change in changes:
        now = time.monotonic()  # first thing: what follows is the benchmark's own work
        iid = change.instance.instance_id
        if change.action == "ADDED" and iid in missing:
            missing.discard(iid)
            seen[iid].append(now)
            if not missing:
                return


async def watching(clients: list[DiscoveryClient]) -> None:
    """Wait until every client keeps its copy by an open watch stream."""
    deadline = time.monotonic() + READY_TIMEOUT
    # `fetches` counts the stream's opening: the mode alone is set by the full fetch before it
    while not all(c.sync_mode == "watch" and c.stats.fetches for c in clients):
        if time.monotonic() > deadline:
            modes = sorted({c.sync_mode for c in clients})
            raise RuntimeError(f"not every client is watching after {READY_TIMEOUT} s: {modes}")
        await asyncio.sleep(READY_POLL)


def pauses_summary(pauses: list[tuple[int, float]]) -> dict[str, Any]:
    return {
        "collections": len(pauses),
        "full": sum(1 for generation, _ in pauses if generation == 2),
        "longest_ms": round(max((ms for _, ms in pauses), default=0.0), 1),
    }


async def runner_pipe() -> asyncio.StreamReader:
    """Stdin, where the runner says `go`, then closes it once it has read the CPU figures."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def wait_go(pipe: asyncio.StreamReader, timeout: float) -> None:
    """Wait for the runner's `go`: from then on the `seconds` count."""
    line = await asyncio.wait_for(pipe.readline(), timeout)
    if line.strip() != b"go":
        raise RuntimeError(f"expected `go` on stdin, read {line[:200]!r}")


async def wait_closed(pipe: asyncio.StreamReader, timeout: float) -> None:
    """Wait until the runner closes stdin: closing the clients and exiting before then would
    count in its CPU figures for the registrations."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pipe.read(), timeout)


async def observe(spec: dict[str, Any]) -> dict[str, Any]:
    raise_fd_limit()
    url, expected = str(spec["url"]), set(spec["expected"])
    count, starting = int(spec["clients"]), int(spec["starting"])
    seen: Sightings = {iid: [] for iid in expected}
    async with AsyncExitStack() as stack:
        clients: list[DiscoveryClient] = []
        # A few at a time: each opens a connection for its full fetch, then one for its stream
        for first in range(0, count, starting):
            clients += await asyncio.gather(
                *(
                    stack.enter_async_context(DiscoveryClient(url, register=False))
                    for _ in range(first, min(count, first + starting))
                )
            )
        streams = [client.changes() for client in clients]  # before `ready`: nothing missed
        await watching(clients)
        # As in a process that has run a while: else the first full collection of the start-up's
        # objects (50 clients' worth) falls in the measurement, a 150-500 ms stall (measured)
        gc.collect()
        tasks = [asyncio.ensure_future(sightings(s, seen, expected)) for s in streams]
        pipe = await runner_pipe()
        print("ready", flush=True)
        await wait_go(pipe, float(spec["go_timeout"]))
        deadline = time.monotonic() + float(spec["seconds"])
        with collections() as pauses:
            done, pending = await asyncio.wait(tasks, timeout=deadline - time.monotonic())
        await wait_closed(pipe, deadline - time.monotonic())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        failures = [repr(task.exception()) for task in done if task.exception() is not None]
        totals: dict[str, int] = {}
        for client in clients:
            for name, value in asdict(client.stats).items():
                totals[name] = totals.get(name, 0) + value
        modes = sorted({client.sync_mode for client in clients})
    return {
        "seen": seen,
        "timed_out": len(pending),
        "failures": failures[:5],
        "stats": totals,
        "modes": modes,
        "gc": pauses_summary(pauses),
    }


if __name__ == "__main__":
    configure(level="warning", fmt="json")  # to stderr: stdout carries `ready`
    spec = json.loads(sys.argv[1])
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        result = runner.run(observe(spec))
    Path(spec["out"]).write_text(json.dumps(result))
