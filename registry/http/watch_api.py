"""GET {base}watch: the registry's changes as a stream of Server-Sent Events (ours, not Eureka's).

    id: 42
    event: MODIFIED
    data: {"index":42,"action":"MODIFIED","app":"ORDERS","instanceId":"i-1","instance":{...}}

Each change is one event named by its action (ADDED, MODIFIED, DELETED), with the registry
index as its id and the instance as `GET apps` shows it. A stream starts with a `watching` event
naming the index it goes on from: the `Last-Event-ID` header or `?index=` when given (so a
reconnecting EventSource resumes where it stopped), otherwise the current index. A client whose
index is older than the journal keeps gets a `reset` event and the stream ends: it fetches
`apps/` in full and watches again from that response's `X-Registry-Index`. Comments keep an
idle stream alive through proxies.
"""

from __future__ import annotations

import orjson
from aiohttp import hdrs, web

from registry.appkeys import CACHE, CLOCK, FEED, JOURNAL, READS, REGISTRY
from registry.codec.wire import INDEX_HEADER
from registry.errors import IndexExpired
from registry.feed import sse
from registry.http import params
from registry.http.discovery_api import check_index, forgotten
from registry.tasks import SLICE, Pacer

KEEPALIVE = 15.0  # seconds between comments on an idle stream
RETRY_MS = 2000  # how long a disconnected EventSource waits before reconnecting


async def watch(request: web.Request) -> web.StreamResponse:
    request.app[READS].check()
    registry, journal, feed = request.app[REGISTRY], request.app[JOURNAL], request.app[FEED]
    if journal.purge(now_ms=request.app[CLOCK].wall_ms()):  # retention is exact, as for deltas
        request.app[CACHE].drop_delta()
    resume = request.headers.get("Last-Event-ID")
    position = params.registry_index(resume, "Last-Event-ID")
    if position is None:
        query = params.query_string(request)
        position = params.registry_index(params.query_value(query, "index"), "index")
    if position is None:
        position = registry.index
    response = web.StreamResponse(
        headers={
            hdrs.CONTENT_TYPE: "text/event-stream",
            hdrs.CACHE_CONTROL: "no-cache",
            INDEX_HEADER: str(registry.index),
            "X-Accel-Buffering": "no",  # nginx: pass events on at once
        }
    )
    try:
        check_index(registry, journal, position)
    except IndexExpired as exc:
        await response.prepare(request)
        await response.write(_reset(str(exc), registry.index))
        return response
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    hello = orjson.dumps({"index": position})
    await response.write(
        f"retry: {RETRY_MS}\n".encode() + sse(hello, event="watching", id=position)
    )
    feed.watchers += 1
    try:
        while not feed.closed:
            events = journal.after(position)
            if events is None:
                await response.write(_reset(forgotten(journal, position), registry.index))
                break
            if events:
                # A long backlog (a resumed stream, a mass eviction) goes out in slices,
                # so encoding it never holds the loop for long.
                pacer = Pacer()
                for start in range(0, len(events), SLICE):
                    chunk = events[start : start + SLICE]
                    await response.write(b"".join(feed.encoded(event) for event in chunk))
                    await pacer.pace()
                position = events[-1].index
            elif not await feed.wait_past(position, KEEPALIVE) and not feed.closed:
                await response.write(b": keepalive\n\n")
    except ConnectionError:
        pass  # the client went away
    finally:
        feed.watchers -= 1
    return response


def _reset(detail: str, index: int) -> bytes:
    data = orjson.dumps({"error": "index_expired", "detail": detail, "index": index})
    return sse(data, event="reset")
