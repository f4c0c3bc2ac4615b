"""The observers of the propagation scenario, in a process of their own.

Usage: python -m tests.bench.watchers SPEC_JSON

Watch streams (`GET watch`), long-polls (`apps/delta?index=N&wait=30s`) and stock-client delta
polls (`apps/delta` every `poll_interval` seconds, phases spread evenly over the interval), all
against one registry, note when each first sees each of the `expected` instance ids. It prints
`ready` once every stream is open and every long-poll sent, then, when all have seen all or the
`seconds` are up, writes to the file `out` as JSON, for each kind, each id's sighting times (a
file: the figures run to hundreds of kilobytes, more than a pipe need carry).

Times are `time.monotonic()`, CLOCK_MONOTONIC on Linux: one clock for the whole machine, so the
runner can subtract its own send times from them.

Why a process of its own: the machine has two cores. Reading a thousand streams in the process
that sends the registrations would delay the sends and their timestamps, and the registry, in
its own process, would still be measured against a busy client. What the figures still
include: this one process reads every stream in turn, so the last watcher to see a change has
also waited for all the others to be read here. Separate clients on separate machines would
each see it no later.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from registry.__main__ import new_event_loop

KINDS = ("watch", "long_poll", "poll")
CONNECTING = 64  # streams opened at once: a thousand at once would overflow the listen backlog
JSON = {"Accept": "application/json"}
SETTLE = 0.3  # seconds between starting the long-polls and saying `ready`

Sightings = dict[str, list[float]]  # instance id: when each observer first saw it


def raise_fd_limit() -> None:
    """A thousand streams need a thousand descriptors: take the soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def note(seen: Sightings, missing: set[str], ids: Iterable[str]) -> None:
    """Record this moment for each id among `ids` that this observer had not seen yet."""
    now = time.monotonic()
    for iid in ids:
        if iid in missing:
            missing.discard(iid)
            seen[iid].append(now)


async def open_stream(
    session: aiohttp.ClientSession, url: str, gate: asyncio.Semaphore
) -> aiohttp.ClientResponse:
    """A watch stream, once its `watching` event has arrived (from then on it misses nothing)."""
    async with gate:
        response = await session.get(f"{url}/eureka/watch")
        if response.status != 200:
            raise RuntimeError(f"watch answered {response.status}")
        first = await response.content.readuntil(b"\n\n")
        if b"event: watching" not in first:
            raise RuntimeError(f"watch began with {first[:200]!r}")
        return response


async def watch(response: aiohttp.ClientResponse, seen: Sightings, expected: set[str]) -> None:
    """Read ADDED events until every expected id has come by (or the stream ends)."""
    missing = set(expected)
    try:
        while missing:
            event = await response.content.readuntil(b"\n\n")
            if not event:
                return  # the server ended the stream
            if b"\nevent: ADDED\n" in event:
                data = orjson.loads(event.split(b"\ndata: ", 1)[1])
                note(seen, missing, (data["instanceId"],))
    finally:
        response.close()


def delta_ids(document: dict[str, Any]) -> list[str]:
    """The instance ids a JSON delta lists."""
    return [
        instance["instanceId"]
        for application in document["applications"]["application"]
        for instance in application["instance"]
    ]


async def long_poll(
    session: aiohttp.ClientSession,
    url: str,
    index: int,
    wait: str,
    seen: Sightings,
    expected: set[str],
) -> None:
    """Long-poll from `index`, going on from each answer's X-Registry-Index, until all are seen."""
    missing = set(expected)
    while missing:
        async with session.get(
            f"{url}/eureka/apps/delta?index={index}&wait={wait}", headers=JSON
        ) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"long-poll answered {response.status}: {body[:200]!r}")
            index = int(response.headers["X-Registry-Index"])
        note(seen, missing, delta_ids(orjson.loads(body)))


async def poll(
    session: aiohttp.ClientSession,
    url: str,
    first: float,
    interval: float,
    seen: Sightings,
    expected: set[str],
) -> None:
    """A stock Eureka client: `GET apps/delta` at `first`, then every `interval` seconds."""
    missing = set(expected)
    due = first
    while missing:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        async with session.get(f"{url}/eureka/apps/delta", headers=JSON) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"delta answered {response.status}: {body[:200]!r}")
        note(seen, missing, delta_ids(orjson.loads(body)))
        due += interval


async def registry_index(session: aiohttp.ClientSession, url: str) -> int:
    """The index a client starts long-polling from: a full fetch's X-Registry-Index."""
    async with session.get(f"{url}/eureka/apps/", headers=JSON) as response:
        await response.read()
        return int(response.headers["X-Registry-Index"])


async def observe(spec: dict[str, Any]) -> dict[str, Any]:
    raise_fd_limit()
    url, expected = str(spec["url"]), set(spec["expected"])
    seen: dict[str, Sightings] = {kind: {iid: [] for iid in expected} for kind in KINDS}
    deadline = time.monotonic() + float(spec["seconds"])
    connector = aiohttp.TCPConnector(limit=0)  # no pool limit: every stream holds a connection
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        gate = asyncio.Semaphore(CONNECTING)
        streams = await asyncio.gather(
            *(open_stream(session, url, gate) for _ in range(int(spec["watchers"])))
        )
        index = await registry_index(session, url)
        interval, pollers = float(spec["poll_interval"]), int(spec["pollers"])
        start = time.monotonic()
        observers = [
            *(watch(stream, seen["watch"], expected) for stream in streams),
            *(
                long_poll(session, url, index, str(spec["wait"]), seen["long_poll"], expected)
                for _ in range(int(spec["long_polls"]))
            ),
            *(
                poll(session, url, start + p * interval / pollers, interval, seen["poll"], expected)
                for p in range(pollers)
            ),
        ]
        tasks = [asyncio.ensure_future(observer) for observer in observers]
        await asyncio.sleep(SETTLE)  # the long-polls are waiting at the server, not connecting
        print("ready", flush=True)
        done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        failures = [repr(task.exception()) for task in done if task.exception() is not None]
    return {"seen": seen, "timed_out": len(pending), "failures": failures[:5]}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        result = runner.run(observe(spec))
    Path(spec["out"]).write_text(json.dumps(result))
