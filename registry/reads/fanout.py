"""Writing each change to every caught-up watch stream from one place.

A watch stream that has sent everything up to the newest change is handed to the fan-out (it
is *live*) and its handler parks. Live streams are grouped by what they watch: the whole
registry, or an interest (`watch?apps=A,B`, registry/reads/interest.py), one *subscription*
per distinct interest however many streams share it. When the registry changes, one task
reads the new changes from the journal once, finds for each change the subscriptions that want
it (a lookup by its application and its VIP addresses, whatever the number of subscriptions
or of the names they watch), joins each subscription's events (each encoded once, by the
feed, whatever the subscriptions) into one frame, and writes that frame straight to each of
the subscription's streams' transports, `SLICE` streams per turn of the event loop. At a
thousand streams that is a thousand writes of a few frames, where a wake-up per stream cost a
coroutine switch, a journal read, a filter, a join and aiohttp's write path each.

A subscription's frame ends with the event that leaves it caught up, with the hashcode of
what it watches: each subscription keeps its instances counted by status, counted once as it
starts (from each watched application's counts) and then moved by each change it wants, so a
hashcode costs a few statuses, not the names watched, nor the instances. A subscription
that a burst of changes gave nothing is written nothing; on the feed's beat its streams are
sent a keepalive whose `id` moves them on to the newest change, so that a stream that watched
quietly for long resumes from a change the journal still keeps, not from a forgotten one.

A round of writes that took longer than `REST_AFTER`, while more changes came, is followed by
a rest as long: under churn the fan-out takes at most half of the event loop, however many
streams there are, so requests (heartbeats first) keep the other half, and the changes made
meanwhile go out joined in the next round's frames, one write per stream for all of them; a
change alone goes out at once (docs/operations.md has figures of
300 filtered streams under registration churn, before and after).

A stream goes back to its handler, which catches up by itself with aiohttp's back-pressure,
when writing to it is not a good idea: its transport is closing, or holds more than
`HIGH_WATER` bytes it could not send yet (a slow reader), or a burst of changes makes its
frame over `MAX_FRAME` bytes (a mass eviction: each stream then paces its own backlog). A frame
is what aiohttp itself would send: a chunk of the chunked body, or the bytes alone on an
HTTP/1.0 stream, which has none.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Protocol

from registry.common.hashcode import hash_of_counts
from registry.common.tasks import SLICE
from registry.core.model import ActionType, ChangeEvent, InstanceStatus
from registry.health.histogram import Histogram
from registry.reads.interest import Interest, vips_of, vips_of_change
from registry.reads.journal import DeltaJournal, Entry

HIGH_WATER = 64 * 1024  # unsent bytes at which a stream is left to its handler's pacing
MAX_FRAME = 64 * 1024  # a larger burst is sent by each stream's handler, paced
KEEPALIVE_COMMENT = b": keepalive\n\n"
REST_AFTER = 0.005  # what an idle stream is sent on a beat
# Upper bounds, in seconds, of the fan-out durations' buckets: finer where a thousand streams'
# writes fall on a small machine (tens of milliseconds).
BOUNDS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.1, 0.2, 0.5, 1.0)


class Events(Protocol):
    """What the fan-out asks of the feed: events encoded once, and instances counted."""

    @property
    def index(self) -> int: ...

    def encoded(self, event: Entry) -> bytes: ...

    def encoded_bare(self, event: Entry) -> bytes: ...

    def encoded_with(self, event: Entry, hashcode: str) -> bytes: ...

    def counts(self, interest: Interest) -> Counter[InstanceStatus]: ...

    def event_id(self, index: int) -> str: ...


class Subscription:
    """The live streams that watch the same thing (`interest`; None: the whole registry),
    and the instances it covers, by status, as the registry is now."""

    __slots__ = ("counts", "interest", "streams")

    def __init__(self, interest: Interest | None, counts: Counter[InstanceStatus]) -> None:
        self.interest = interest
        self.counts = counts
        self.streams: dict[LiveStream, None] = {}


class LiveStream:
    """One parked watch stream: where to write, and how to wake its handler."""

    __slots__ = ("chunked", "resumed", "subscription", "transport")

    def __init__(
        self,
        transport: asyncio.WriteTransport,
        chunked: bool,
        resumed: asyncio.Future[int],
        subscription: Subscription,
    ) -> None:
        self.transport = transport
        self.chunked = chunked
        self.resumed = resumed  # set to the index the stream has been sent up to
        self.subscription = subscription


class FanOut:
    def __init__(self, journal: DeltaJournal, events: Events) -> None:
        self._journal = journal
        self._events = events
        self._subscriptions: dict[Interest | None, Subscription] = {}
        self._by_app: dict[str, set[Subscription]] = {}  # who watches an application
        self._by_vip: dict[str, set[Subscription]] = {}  # ... and a VIP address
        self._live = 0
        self._position = 0  # the index every live stream has been sent (or is being sent) to
        self._keepalive = False
        self._task: asyncio.Task[None] | None = None
        self.frames = 0  # rounds of writes, for tests: each is one write per stream at most
        # Seconds from a change to the last write of its frame, on `/metrics`. Real time, as
        # the event-loop lag is: this watches the process, not the registry's clock.
        self.durations = Histogram(BOUNDS)
        self.timer = time.monotonic  # a test sets its own
        self.work_timer = time.perf_counter  # times a round of writes (a test sets its own)
        self.rest_after = REST_AFTER
        self.rests = 0  # rests taken after a long round, for tests and the benchmark
        self._changed_at: float | None = None  # the first change not yet cut into a frame

    def __len__(self) -> int:
        return self._live

    @property
    def subscriptions(self) -> int:
        """Distinct things the live streams watch (the whole registry counts as one)."""
        return len(self._subscriptions)

    async def park(
        self,
        transport: asyncio.WriteTransport | None,
        chunked: bool,
        position: int,
        latest: int,
        interest: Interest | None = None,
    ) -> int | None:
        """Hand a stream that has been sent everything up to `position` (of what `interest`
        wants; None: everything) to the fan-out, when it can join (`latest` is the
        registry's index); wait until it has to go on by itself, and return the index it has
        been sent up to then. None when it cannot join: it is behind the live streams, or has
        no open transport."""
        if transport is None or transport.is_closing():
            return None
        while self._task is not None and position > self._position:
            await asyncio.shield(self._task)  # ahead of a fan-out under way: it catches up
        if self._live or self._task is not None:
            if position != self._position:
                return None
        elif position == latest:
            self._position = position
        else:
            return None
        future = asyncio.get_running_loop().create_future()
        stream = LiveStream(transport, chunked, future, self._subscribe(interest))
        stream.subscription.streams[stream] = None
        self._live += 1
        try:
            return await stream.resumed
        finally:
            self._leave(stream)

    def changed(self) -> None:
        """The registry changed: send the new changes to every live stream."""
        if self._live:
            if self._changed_at is None:
                self._changed_at = self.timer()
            self._start()

    def beat(self) -> None:
        """Send every live stream a keepalive comment."""
        if self._live:
            self._keepalive = True
            self._start()

    def counted(self, event: ChangeEvent) -> None:
        """Move the counts of the subscriptions whose instances `event` changed."""
        if not (self._by_app or self._by_vip):
            return  # no subscription of some interest
        instance, previous = event.lease.instance, event.previous
        for subscription in self._watching(instance.app, vips_of_change(event)):
            interest = subscription.interest
            assert interest is not None
            if previous is not None and interest.matches(previous):
                subscription.counts[previous.status] -= 1
            if event.action is not ActionType.DELETED and interest.matches(instance):
                subscription.counts[instance.status] += 1

    def recount(self) -> None:
        """Count every subscription's instances again (the registry was loaded anew)."""
        for interest, subscription in self._subscriptions.items():
            if interest is not None:
                subscription.counts = self._events.counts(interest)

    def release_all(self) -> None:
        """Every live stream back to its handler (the server is stopping)."""
        for subscription in list(self._subscriptions.values()):
            self._release(subscription, self._position)

    def _subscribe(self, interest: Interest | None) -> Subscription:
        subscription = self._subscriptions.get(interest)
        if subscription is None:
            counts = Counter() if interest is None else self._events.counts(interest)
            subscription = self._subscriptions[interest] = Subscription(interest, counts)
            if interest is not None:
                for app in interest.apps:
                    self._by_app.setdefault(app, set()).add(subscription)
                for vip in interest.vips:
                    self._by_vip.setdefault(vip, set()).add(subscription)
        return subscription

    def _leave(self, stream: LiveStream) -> None:
        subscription = stream.subscription
        if stream in subscription.streams:
            del subscription.streams[stream]
            self._live -= 1
            if not subscription.streams:
                self._unsubscribe(subscription)

    def _unsubscribe(self, subscription: Subscription) -> None:
        interest = subscription.interest
        del self._subscriptions[interest]
        if interest is not None:
            for names, index in ((interest.apps, self._by_app), (interest.vips, self._by_vip)):
                for name in names:
                    watching = index[name]
                    watching.discard(subscription)
                    if not watching:
                        del index[name]

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fan-out")

    async def _run(self) -> None:
        try:
            while self._live:
                changed_at, self._changed_at = self._changed_at, None
                events = self._journal.after(self._position)
                if events is None:  # forgotten already: each handler sends its reset
                    self.release_all()
                    return
                if not events and not self._keepalive:
                    return
                sent = self._position
                if events:
                    self._position = events[-1].index
                # Every frame is cut before the first write: the hashcodes they carry are of
                # the registry as it is at the last of `events`.
                frames = self._frames(events, sent)
                self._keepalive = False
                started = self.work_timer()
                await self._write(frames, sent)
                if events and changed_at is not None:
                    self.durations.record(self.timer() - changed_at)
                took = self.work_timer() - started
                if took > self.rest_after and self._events.index > self._position:
                    self.rests += 1
                    await asyncio.sleep(took)  # real time: this paces the process's work
        finally:
            self._task = None

    def _frames(self, events: list[Entry], sent: int) -> list[tuple[Subscription, bytes]]:
        """What each subscription is sent of `events` (on a beat, a keepalive to those
        `events` gave nothing); a subscription whose frame is too large goes back to its
        handlers, at `sent`."""
        wanted: dict[Subscription, list[Entry]] = {}
        everything = self._subscriptions.get(None)
        if everything is not None and events:
            wanted[everything] = events
        if self._by_app or self._by_vip:  # subscriptions of some interest
            for event in events:
                for subscription in self._watching(event.lease.instance.app, vips_of(event)):
                    wanted.setdefault(subscription, []).append(event)
        latest = self._position == self._events.index
        frames = []
        for subscription, chosen in wanted.items():
            frame = self._frame(subscription, chosen, latest)
            if len(frame) > MAX_FRAME:
                self._release(subscription, sent)
            else:
                frames.append((subscription, frame))
        if self._keepalive:
            moved_on = b": keepalive\nid: %b\n\n" % self._events.event_id(self._position).encode()
            for interest, subscription in self._subscriptions.items():
                if subscription not in wanted:
                    frame = KEEPALIVE_COMMENT if interest is None else moved_on
                    frames.append((subscription, frame))
        return frames

    def _watching(self, app: str, vips: set[str]) -> set[Subscription]:
        """The subscriptions of some interest that watch `app`, or one of `vips`: a lookup
        each, whatever the number of subscriptions or of the names they watch."""
        found = set(self._by_app.get(app, ()))
        if self._by_vip:
            for vip in vips:
                found.update(self._by_vip.get(vip, ()))
        return found

    def _frame(self, subscription: Subscription, events: list[Entry], latest: bool) -> bytes:
        """`events` for a subscription; for one of some interest, the last with its hashcode
        when the frame leaves it caught up with the registry (`latest`): the changes after
        it, which it does not want, did not touch what it watches."""
        if subscription.interest is None:
            return b"".join(map(self._events.encoded, events))
        *before, last = events
        ending = (
            self._events.encoded_with(last, hash_of_counts(subscription.counts))
            if latest
            else self._events.encoded_bare(last)
        )
        return b"".join([*map(self._events.encoded_bare, before), ending])

    async def _write(self, frames: list[tuple[Subscription, bytes]], sent: int) -> None:
        """Write each subscription's frame to each of its streams live now; `sent`: the
        index they had before it."""
        writes: list[tuple[LiveStream, bytes, bytes]] = []
        for subscription, frame in frames:
            chunk = b"%x\r\n%b\r\n" % (len(frame), frame)
            writes.extend((stream, frame, chunk) for stream in subscription.streams)
        self.frames += bool(writes)
        for start in range(0, len(writes), SLICE):
            if start:
                await asyncio.sleep(0)  # let requests in between slices
            for stream, frame, chunk in writes[start : start + SLICE]:
                if stream.resumed.done():  # left meanwhile
                    continue
                transport = stream.transport
                if transport.is_closing() or transport.get_write_buffer_size() > HIGH_WATER:
                    self._hand_back(stream, sent)
                    continue
                try:
                    transport.write(chunk if stream.chunked else frame)
                except Exception:  # a transport that fails: its handler finds out, not the rest
                    self._hand_back(stream, sent)

    def _release(self, subscription: Subscription, position: int) -> None:
        for stream in list(subscription.streams):
            self._hand_back(stream, position)

    def _hand_back(self, stream: LiveStream, position: int) -> None:
        self._leave(stream)
        if not stream.resumed.done():
            stream.resumed.set_result(position)
