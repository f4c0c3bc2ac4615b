"""Keeping the client's copy up to date: a full fetch, then the fastest way the server offers.

1. `GET apps/` in full, at the start, after going over to another server, and whenever the copy
   cannot be trusted: a reconcile hash that differs from the server's, a `reset` event, a 410.
2. Then, from the index and epoch the full fetch carried (`X-Registry-Index`,
   `X-Registry-Epoch`, which only our server sends):
   - the SSE stream `watch`, resumed with `Last-Event-ID` after a break: each change applied
     as it comes and checked against the hash its event carries;
   - where the server does not stream (403 `not_served`, 404, 501, a 200 that is no event
     stream, or streams that end before their first event), the long-poll delta
     `apps/delta?index=N&wait=30s`, held by the server until something changes;
   - where the server does not long-poll either (its answer lacks `X-Registry-Since`: a stock
     Eureka server ignores the parameters), Eureka's own way: `GET apps/delta` every
     `fetch_interval`, a full fetch instead while the copy is empty or after any answer but
     200, as the Java client does.
   Each delta is merged with Eureka's rules and its `apps__hashcode` compared after.

Whatever goes wrong is logged and tried again after a jittered, growing pause, from where the
copy stood when the server is the same (a `reset` or a 410 says when it cannot go on from
there); the copy keeps serving lookups meanwhile.
"""

from __future__ import annotations

import asyncio
import random
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import structlog

from registry.client import sse
from registry.client.local_copy import LocalCopy
from registry.client.model import Action, Change, Instance
from registry.client.servers import Server
from registry.client.transport import Reply, Transport, Unavailable
from registry.common.clock import Clock
from registry.common.tasks import Pacer

log = structlog.get_logger()

JSON = {"Accept": "application/json"}
LONG_POLL_WAIT = 30.0  # seconds the server holds a long-poll
KEEPALIVE_GRACE = 45.0  # a watch stream silent this long is dead (the server beats every 15 s)
MAX_EVENT_BYTES = 1 << 21  # an instance's event may be as large as a register body (1 MiB)
MAX_PAUSE = 30.0  # seconds between tries at most, after failures or a server's Retry-After
STREAM_PAUSE = 1.0  # before opening again a stream the server ended
_ACTIONS = {action.value: action for action in Action}
BAD_STREAMS = 3  # streams ending before their first event, in a row, before watching stops
MOVE_CHECK = 5.0  # how often a watching client looks whether it should use another server


@dataclass(slots=True)
class Counters:
    """What the client has done so far, readable at any time as `client.stats`."""

    registrations: int = 0
    heartbeats: int = 0
    heartbeat_failures: int = 0  # heartbeats and registrations no server took
    fetches: int = 0  # every answer read: full, delta, long-poll, watch stream opened
    full_fetches: int = 0
    events: int = 0  # watch events applied
    resyncs: int = 0  # full fetches because the copy could not be trusted
    failovers: int = 0


class Resync(Exception):
    """The copy cannot be trusted: fetch it in full."""


class Fetcher:
    def __init__(
        self,
        transport: Transport,
        copy: LocalCopy,
        clock: Clock,
        stats: Counters,
        publish: Callable[[list[Change]], None],
        *,
        fetch_interval: float,
    ) -> None:
        self._transport = transport
        self._copy = copy
        self._clock = clock
        self._stats = stats
        self._publish = publish
        self._fetch_interval = fetch_interval
        self._index: int | None = None  # None: the server keeps no index (a stock server)
        self._epoch = ""
        self._synced_with: Server | None = None
        self._rng = random.Random()
        self._unsettled = 0  # resyncs in a row, with no change applied since
        self._began = False  # whether the open stream has sent an event yet
        self._bad_streams = 0  # streams in a row that ended before their first event
        self.first_fetch = asyncio.Event()  # set when the first full fetch has been tried

    @property
    def mode(self) -> str:
        """How the copy is kept now: `watch`, `long_poll`, `delta`, or `none` before the first
        full fetch (and while the client has no server it trusts)."""
        server = self._synced_with
        if server is None:
            return "none"
        if self._index is not None and server.watch:
            return "watch"
        if self._index is not None and server.long_poll:
            return "long_poll"
        return "delta"

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await self._step()
                failures = 0
            except Resync as exc:
                # A copy that cannot be trusted is fetched again at once; one that keeps
                # failing to be (a proxy spreading calls over nodes of other epochs) waits.
                self._stats.resyncs += 1
                self._synced_with = None
                self._unsettled += 1
                pause = self._pause(self._unsettled - 1) if self._unsettled > 1 else 0.0
                log.info("registry_resync", reason=str(exc), retry_in=round(pause, 2))
                await self._clock.sleep(pause)
            except Unavailable as exc:
                # The position is kept: the same server is asked to go on from it (its
                # `reset` or 410 says when it cannot); another server's full fetch replaces it.
                self.first_fetch.set()
                failures += 1
                pause = self._pause(failures)
                log.warning("registry_fetch_failed", error=str(exc), retry_in=round(pause, 2))
                await self._clock.sleep(pause)

    async def _step(self) -> None:
        server = self._transport.choose()
        if self._synced_with is not server:
            await self._full_fetch()
        elif self._index is not None and server.watch:
            await self._watch(server)
        elif self._index is not None and server.long_poll:
            await self._long_poll(server)
        else:
            await self._clock.sleep(self._fetch_interval)
            if self._copy.empty:  # as the Java client: an empty copy is fetched in full
                await self._full_fetch()
            else:
                await self._delta(server)

    async def _full_fetch(self) -> None:
        # The download is bounded per read, not as a whole: 100 000 instances take a while.
        reply = await self._transport.call("GET", "apps/", headers=JSON, whole=False)
        await self._check(reply)
        try:
            document = orjson.loads(reply.body)["applications"]
            changes: list[Change] = []
            pacer = Pacer()  # the application's loop gets a turn every millisecond of this
            for _ in self._copy.replace(_instances(document), changes):
                await pacer.pace()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Not a registry (a proxy's page, a broken server): another may be one.
            self._transport.failed(reply.server, "answered a document that is no registry")
            raise Unavailable(f"{reply.server.url} apps/: {type(exc).__name__}: {exc}") from exc
        self._stats.fetches += 1
        self._stats.full_fetches += 1
        self._index, self._epoch = _position(reply)
        self._synced_with = reply.server
        self.first_fetch.set()
        self._publish(changes)

    async def _delta(self, server: Server) -> None:
        reply = await self._transport.call("GET", "apps/delta", headers=JSON)
        if reply.server is not server:
            return  # the call went over to another server: fetched in full from it next
        if reply.status == 429:
            await self._check(reply)
        if reply.status != 200:
            await self._full_fetch()  # what the Java client does with any other answer
            return
        self._merge(reply)

    async def _long_poll(self, server: Server) -> None:
        reply = await self._transport.call(
            "GET",
            "apps/delta",
            params={"index": str(self._index), "epoch": self._epoch, "wait": "30s"},
            headers=JSON,
            read_timeout=LONG_POLL_WAIT + self._transport.read_timeout,
        )
        if reply.server is not server:
            return  # the call went over to another server: fetched in full from it next
        if reply.status == 410:
            raise Resync("the server no longer keeps the changes after our index")
        if reply.status == 403 and _error_code(reply.body) == "not_served":
            server.long_poll = False  # deltas disabled: full fetches on the interval
            return
        await self._check(reply)
        if "X-Registry-Since" not in reply.headers:
            server.long_poll = False
            log.info("registry_long_poll_unsupported", server=server.url)
        self._merge(reply)

    async def _watch(self, server: Server) -> None:
        # Where to go on from, as an EventSource gives it back: `index@epoch`.
        headers = {"Accept": "text/event-stream", "Last-Event-ID": f"{self._index}@{self._epoch}"}
        async with self._transport.stream(
            "watch", headers=headers, read_timeout=KEEPALIVE_GRACE
        ) as response:
            if (
                response.status in (404, 405, 501)
                or (response.status == 403 and _error_code(await response.read()) == "not_served")
                or (response.status == 200 and response.content_type != "text/event-stream")
            ):
                server.watch = False
                log.info("registry_watch_unsupported", server=server.url, status=response.status)
                return
            if response.status == 410:
                raise Resync("the server no longer keeps the changes after our index")
            if response.status != 200:
                await self._check(await _read(response, server))
            self._stats.fetches += 1
            self._began = False
            if not await self._follow(response, server):
                return  # the client moved to another server: a full fetch from it, at once
        if not self._began:  # ended before its first event: a stream that is none
            self._bad_streams += 1
            if self._bad_streams >= BAD_STREAMS:
                server.watch = False
                log.info("registry_watch_unsupported", server=server.url, status=200)
            raise Unavailable(f"{server.url} watch: the stream ended before its first event")
        await self._clock.sleep(STREAM_PAUSE * self._rng.uniform(0.5, 1.0))

    async def _follow(self, response: aiohttp.ClientResponse, server: Server) -> bool:
        """Apply the stream's events until it ends (True), or until the client moves to
        another server (False): a failover of the heartbeats, or the first server's return,
        which for a pure discovery client is looked for every MOVE_CHECK seconds."""
        reading = asyncio.ensure_future(self._apply_events(response))
        try:
            while not reading.done():
                moved = asyncio.ensure_future(self._transport.moved.wait())
                pause = asyncio.ensure_future(self._clock.sleep(MOVE_CHECK))
                try:
                    await asyncio.wait((reading, moved, pause), return_when=FIRST_COMPLETED)
                finally:
                    moved.cancel()
                    pause.cancel()
                if not reading.done() and self._transport.choose() is not server:
                    return False
        finally:
            if not reading.done():
                reading.cancel()
                await asyncio.wait((reading,))  # our own cancellation still raises here
        if not reading.cancelled():
            reading.result()  # what ended the stream: its end, a Resync, a broken connection
        return True

    async def _apply_events(self, response: aiohttp.ClientResponse) -> None:
        try:
            async for event in sse.events(response.content, max_line=MAX_EVENT_BYTES):
                self._on_event(event)
        except ValueError as exc:  # a line too long, or no UTF-8
            raise Resync(f"a stream that could not be read: {exc}") from exc

    def _on_event(self, event: sse.Event) -> None:
        self._began = True
        self._bad_streams = 0
        if event.name == "reset":
            raise Resync(f"the watch stream was reset: {event.data}")
        action = _ACTIONS.get(event.name)
        if action is None:
            return  # `watching`, or an event of a later release
        try:
            data = orjson.loads(event.data)
            instance = Instance.from_wire(data["instance"])
            index = int(data["index"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Resync(f"an event that could not be read: {type(exc).__name__}: {exc}") from exc
        change = self._copy.apply(action, instance)
        self._index = index
        self._stats.events += 1
        if change is not None:
            self._publish([change])
        expected = data.get("hashcode")
        if expected is not None and expected != self._copy.reconcile_hash():
            raise Resync(
                f"reconcile hash {self._copy.reconcile_hash()!r} after event {self._index}, "
                f"the server's {expected!r}"
            )
        self._unsettled = 0

    def _merge(self, reply: Reply) -> None:
        """Merge a delta with Eureka's rules and compare the hash after."""
        self._stats.fetches += 1
        try:
            document = orjson.loads(reply.body)["applications"]
            changed = list(_actions(document))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Resync(f"a delta that could not be read: {type(exc).__name__}: {exc}") from exc
        changes = []
        for instance, action in changed:
            change = self._copy.apply(action, instance)
            if change is not None:
                changes.append(change)
        if self._index is not None:
            self._index, self._epoch = _position(reply)
        self._publish(changes)
        expected = document.get("apps__hashcode", "")
        if expected != self._copy.reconcile_hash():
            raise Resync(
                f"reconcile hash {self._copy.reconcile_hash()!r} after the delta, "
                f"the server's {expected!r}"
            )
        self._unsettled = 0

    async def _check(self, reply: Reply) -> None:
        """Return if the answer is a 200; otherwise wait as the server asks (429) or leave
        it (any other refusal: not synced yet, a credential it does not take), and raise."""
        if reply.status == 200:
            return
        detail = reply.body[:300].decode("utf-8", "replace")
        if reply.status == 429:
            retry_after = reply.headers.get("Retry-After", "1")
            pause = min(MAX_PAUSE, float(retry_after) if retry_after.isdigit() else 1.0)
            await self._clock.sleep(pause * self._rng.uniform(1.0, 1.5))
            raise Unavailable(f"{reply.server.url} is busy (429)")
        self._transport.failed(reply.server, f"answered {reply.status}")
        raise Unavailable(f"{reply.server.url} answered {reply.status}: {detail}")

    def _pause(self, failures: int) -> float:
        pause: float = min(MAX_PAUSE, 0.5 * 2 ** (failures - 1))
        return pause * self._rng.uniform(0.5, 1.0)


def _instances(document: Mapping[str, Any]) -> Iterable[Instance]:
    for item in _items(document):
        yield Instance.from_wire(item)


def _actions(document: Mapping[str, Any]) -> Iterable[tuple[Instance, Action]]:
    for item in _items(document):
        yield Instance.from_wire(item), Action(item.get("actionType") or "MODIFIED")


def _items(document: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """Each instance of an applications document; either list may be a lone object."""
    for app in _listed(document.get("application")):
        yield from _listed(app.get("instance"))


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _position(reply: Reply) -> tuple[int | None, str]:
    """The index and epoch an answer of our server was made at; None from a stock server."""
    index = reply.headers.get("X-Registry-Index")
    return (int(index) if index else None), reply.headers.get("X-Registry-Epoch", "")


def _error_code(body: bytes) -> str:
    try:
        error = orjson.loads(body).get("error", "")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return str(error)


async def _read(response: Any, server: Server) -> Reply:
    return Reply(response.status, response.headers, await response.read(), server)
