"""GET {base}watch: the registry's changes as a stream of Server-Sent Events (ours, not Eureka's).

    id: 42@5f0c9a1e
    event: MODIFIED
    data: {"index":42,"action":"MODIFIED","app":"ORDERS","instanceId":"i-1","instance":{...},
           "hashcode":"UP_7_"}

Each change is one event named by its action (ADDED, MODIFIED, DELETED), with the instance as
`GET apps` shows it and the registry's `apps__hashcode` just after the change, which a client
that keeps a copy compares with its own as it would after a delta (absent for changes made
while no stream was open). Its id is the registry index and the epoch that index belongs to (this
node, this run), so an id given back by a client that reconnects to another node, or to this
one after a restart, is recognised as foreign. A stream starts with a `watching` event naming
the index it goes on from: the `Last-Event-ID` header or `?index=` (with `&epoch=`) when given,
so a reconnecting EventSource resumes where it stopped, otherwise the current index. A client
whose index this node cannot continue from (older than the journal keeps, or foreign) gets a
`reset` event and the stream ends: it fetches `apps/` in full and watches again from that
response's `X-Registry-Index` and `X-Registry-Epoch`. Comments keep an idle stream alive
through proxies (`KEEPALIVE_COMMENT`, sent on the feed's beat every `feed.KEEPALIVE` seconds).
With `?apps=A,B` or `?vips=v`, a stream gets those applications' and VIP addresses' changes
alone, with their own hashcode (registry/reads/interest.py); streams that name the same ones
share the work of sending them (registry/reads/fanout.py).

A node holds at most `reads.watch_streams_max` streams, and one client at most
`reads.watch_streams_per_credential`: the user name of its credential, or, when no credentials are
configured, its address (an IPv6 one by its /64, as the fetch limit counts it). Beyond either
a stream is refused 429 with a Retry-After, and counted (registry/reads/watchers.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import orjson
from aiohttp import hdrs, web

from registry.appkeys import (
    CACHE,
    CLOCK,
    FEED,
    JOURNAL,
    LIFECYCLE,
    LIMITER,
    REGISTRY,
    SETTINGS,
)
from registry.codec.wire import EPOCH_HEADER, INDEX_HEADER
from registry.common.tasks import SLICE, Pacer
from registry.errors import IndexExpired, NotServed, TooManyRequests
from registry.http import auth, params
from registry.http.discovery_api import check_index, forgotten
from registry.http.ratelimit import client_key
from registry.http.throttle import limited
from registry.reads.fanout import KEEPALIVE_COMMENT
from registry.reads.feed import ChangeFeed, sse
from registry.reads.interest import Interest
from registry.reads.journal import Entry
from registry.reads.watchers import NODE

RETRY_MS = 2000  # how long a disconnected EventSource waits before reconnecting
REFUSED_RETRY_AFTER = "30"  # seconds: streams last; one closing frees a place only now and then


async def watch(request: web.Request) -> web.StreamResponse:
    request.app[LIFECYCLE].check_reads()
    if not request.app[SETTINGS].reads.watch:
        raise NotServed(
            "the watch stream is turned off on this server (watch = false); long-poll "
            "apps/delta?index=N&wait=30s or poll apps/delta instead"
        )
    registry, journal, feed = request.app[REGISTRY], request.app[JOURNAL], request.app[FEED]
    interest = params.interest(request)
    if journal.purge(now_ms=request.app[CLOCK].wall_ms()):  # retention is exact, as for deltas
        request.app[CACHE].drop_delta()
    position, epoch = params.event_id(request.headers.get("Last-Event-ID"), "Last-Event-ID")
    if position is None:
        query = params.query_string(request)
        position = params.registry_index(params.query_value(query, "index"), "index")
        epoch = params.query_value(query, "epoch")
    if position is None:
        position = registry.index
    limiter = request.app[LIMITER]
    if position < registry.index and limiter is not None:
        # Catching up replays the journal (a deploy's minutes of it): as costly as a delta.
        limited(limiter, request.app[CLOCK])(request)
    if request.method == "HEAD":
        return await _prepared(request)
    with _admitted(request):
        response = await _prepared(request)
        try:
            try:
                check_index(registry, journal, position, epoch)
            except IndexExpired as exc:
                await response.write(_reset(feed, str(exc)))
                return response
            hello = orjson.dumps({"index": position, "epoch": registry.epoch})
            await response.write(
                f"retry: {RETRY_MS}\n".encode()
                + sse(hello, event="watching", id=feed.event_id(position))
            )
            await _stream(request, response, position, interest)
        except ConnectionError:
            pass  # the client went away
    return response


async def _prepared(request: web.Request) -> web.StreamResponse:
    """The stream's response, its head sent."""
    registry = request.app[REGISTRY]
    response = web.StreamResponse(
        headers={
            hdrs.CONTENT_TYPE: "text/event-stream",
            hdrs.CACHE_CONTROL: "no-cache",
            INDEX_HEADER: str(registry.index),
            EPOCH_HEADER: registry.epoch,
            "X-Accel-Buffering": "no",  # nginx: pass events on at once
        }
    )
    await response.prepare(request)
    return response


@contextlib.contextmanager
def _admitted(request: web.Request) -> Iterator[None]:
    """Count the stream while it is open, or refuse it (429) past a cap."""
    settings, streams = request.app[SETTINGS], request.app[FEED].streams
    user = auth.principal(request)
    client = f"credential {user}" if user is not None else f"address {client_key(request.remote)}"
    per_node, per_client = (
        settings.reads.watch_streams_max,
        settings.reads.watch_streams_per_credential,
    )
    refused = streams.admit(client, per_node=per_node, per_client=per_client)
    if refused == NODE:
        raise TooManyRequests(
            f"this node serves {per_node} watch streams at most (reads.watch_streams_max); "
            "long-poll apps/delta?index=N&wait=30s meanwhile",
            retry_after=REFUSED_RETRY_AFTER,
        )
    if refused is not None:
        raise TooManyRequests(
            f"the {client} holds {streams.of(client)} watch streams, the most one client may "
            "(reads.watch_streams_per_credential)",
            retry_after=REFUSED_RETRY_AFTER,
        )
    try:
        yield
    finally:
        streams.leave(client)


async def _stream(
    request: web.Request, response: web.StreamResponse, position: int, interest: Interest | None
) -> None:
    """Send every change after `position` as it happens, until the server stops: caught up,
    the stream is the fan-out's to write to (one frame for every stream that watches the
    same); behind, it catches up here."""
    feed, journal = request.app[FEED], request.app[JOURNAL]
    chunked = response.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"
    while not feed.closed:
        events = journal.after(position)
        if events is None:
            await response.write(_reset(feed, forgotten(journal, position)))
            return
        if events:
            position = events[-1].index
            if interest is None:
                await _send(response, events, feed.encoded)
            else:
                await _send_of(request, response, interest, events, position)
            continue
        sent = await feed.fanout.park(request.transport, chunked, position, feed.index, interest)
        if sent is not None:
            position = sent
            continue
        await _idle(response, feed, position)


async def _send(
    response: web.StreamResponse, events: list[Entry], encoded: Callable[[Entry], bytes]
) -> None:
    """A batch of events; a long one (a resumed stream, a mass eviction) encoded and written
    in slices, so that it never holds the loop for long."""
    pacer = Pacer()
    for start in range(0, len(events), SLICE):
        await response.write(b"".join(map(encoded, events[start : start + SLICE])))
        await pacer.pace()


async def _send_of(
    request: web.Request,
    response: web.StreamResponse,
    interest: Interest,
    events: list[Entry],
    position: int,
) -> None:
    """The events `interest` wants, without the registry's hashcode; the last one, when it
    leaves the stream caught up, with the hashcode of what it watches as it now is
    (registry/reads/interest.py). A batch that ends past the last event sent moves the
    stream's id on all the same (an `id` line, no event), so that a stream that matched
    nothing for a while resumes from now, not from a change forgotten since."""
    registry, feed = request.app[REGISTRY], request.app[FEED]
    chosen = [event for event in events if interest.wants(event)]
    hashcode = None
    if chosen and position == registry.index:
        hashcode = feed.hashcode(interest)
    last = chosen[-1] if chosen else None

    def encoded(event: Entry) -> bytes:
        if event is last and hashcode is not None:
            return feed.encoded_with(event, hashcode)
        return feed.encoded_bare(event)

    await _send(response, chosen, encoded)
    if last is None or last.index != position:
        await response.write(f"id: {feed.event_id(position)}\n\n".encode())


async def _idle(response: web.StreamResponse, feed: ChangeFeed, position: int) -> None:
    """Wait for the next change (or beat, or close); a beat with nothing new is a comment."""
    beats = feed.beats
    await feed.next()
    if feed.beats != beats and feed.index <= position and not feed.closed:
        await response.write(KEEPALIVE_COMMENT)


def _reset(feed: ChangeFeed, detail: str) -> bytes:
    """The end of a stream that cannot go on. Its id is the current index, so an EventSource
    that reconnects without handling it resumes from now rather than being reset forever."""
    index = feed.index
    data = orjson.dumps({"error": "index_expired", "detail": detail, "index": index})
    return sse(data, event="reset", id=feed.event_id(index))
