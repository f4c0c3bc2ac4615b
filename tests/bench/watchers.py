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
from urllib.parse import urlsplit

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


class WatchReader(asyncio.Protocol):
    """One watch stream, read by a bare protocol: each chunk that arrives is searched for the
    ids of ADDED events and noted at once. aiohttp's client reads a stream through a coroutine
    per stream (a wake-up, a read and a parse per event), which at a thousand streams cost
    this process more than the registry spends sending: the last stream's sighting measured
    the observer. The chunked framing is left in the bytes: it falls between events (the
    registry writes whole events to a chunk), never inside the one line of JSON."""

    def __init__(self, seen: Sightings, expected: set[str]) -> None:
        self.missing = set(expected)
        self.seen = seen
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._buffer = b""  # what came after the last whole event

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self.opened.done():
            if b"event: watching" not in self._buffer:
                return
            if not self._buffer.startswith(b"HTTP/1.1 200"):
                self.opened.set_exception(RuntimeError(f"watch began {self._buffer[:200]!r}"))
                return
            self.opened.set_result(None)
        if b"\n\n" not in self._buffer:
            return
        *events, self._buffer = self._buffer.split(b"\n\n")
        added = [event for event in events if b"\nevent: ADDED\n" in event]
        if added:
            ids = [orjson.loads(event.split(b"\ndata: ", 1)[1])["instanceId"] for event in added]
            note(self.seen, self.missing, ids)
            if not self.missing and not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(RuntimeError("the watch stream closed before it began"))
        if not self.done.done():
            self.done.set_result(None)  # the server ended the stream


async def open_stream(
    url: str, gate: asyncio.Semaphore, seen: Sightings, expected: set[str]
) -> WatchReader:
    """A watch stream, once its `watching` event has arrived (from then on it misses nothing)."""
    parts = urlsplit(url)
    async with gate:
        reader = WatchReader(seen, expected)
        transport, _ = await asyncio.get_running_loop().create_connection(
            lambda: reader, parts.hostname, parts.port
        )
        reader.transport = transport
        transport.write(f"GET /eureka/watch HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        await reader.opened
        return reader


async def watch(reader: WatchReader) -> None:
    """Wait until every expected id has come by (or the stream ends)."""
    try:
        await reader.done
    finally:
        assert reader.transport is not None
        reader.transport.close()


def delta_ids(document: dict[str, Any]) -> list[str]:
    """The instance ids a JSON delta lists."""
    return [
        instance["instanceId"]
        for application in document["applications"]["application"]
        for instance in application["instance"]
    ]


class LongPoller(asyncio.Protocol):
    """One long-polling client on one kept-alive connection, read by a bare protocol (for the
    reason `WatchReader` gives): each answer's ids are noted as its last byte arrives, and the
    next poll, from the answer's X-Registry-Index, is sent at once."""

    def __init__(self, netloc: str, wait: str, seen: Sightings, expected: set[str]) -> None:
        self.missing = set(expected)
        self.seen = seen
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._request = f"HTTP/1.1\r\nHost: {netloc}\r\nAccept: application/json\r\n\r\n"
        self._wait = wait
        self._buffer = b""

    def poll(self, index: int) -> None:
        assert self.transport is not None
        self.transport.write(
            f"GET /eureka/apps/delta?index={index}&wait={self._wait} {self._request}".encode()
        )

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        head, found, body = self._buffer.partition(b"\r\n\r\n")
        if not found:
            return
        headers = dict(
            line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:] if b": " in line
        )
        length = int(headers[b"content-length"])
        if len(body) < length:
            return
        if not head.startswith(b"HTTP/1.1 200"):
            self._finish(RuntimeError(f"long-poll answered {head[:200]!r}"))
            return
        self._buffer = body[length:]
        note(self.seen, self.missing, delta_ids(orjson.loads(body[:length])))
        if self.missing:
            self.poll(int(headers[b"x-registry-index"]))
        else:
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(RuntimeError("the long-poll's connection closed"))

    def _finish(self, error: Exception | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


async def long_poll(url: str, index: int, wait: str, seen: Sightings, expected: set[str]) -> None:
    """Long-poll from `index`, going on from each answer's X-Registry-Index, until all are seen."""
    parts = urlsplit(url)
    poller = LongPoller(parts.netloc, wait, seen, expected)
    transport, _ = await asyncio.get_running_loop().create_connection(
        lambda: poller, parts.hostname, parts.port
    )
    poller.transport = transport
    poller.poll(index)
    try:
        await poller.done
    finally:
        transport.close()


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
            *(open_stream(url, gate, seen["watch"], expected) for _ in range(int(spec["watchers"])))
        )
        index = await registry_index(session, url)
        interval, pollers = float(spec["poll_interval"]), int(spec["pollers"])
        start = time.monotonic()
        observers = [
            *(watch(stream) for stream in streams),
            *(
                long_poll(url, index, str(spec["wait"]), seen["long_poll"], expected)
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
