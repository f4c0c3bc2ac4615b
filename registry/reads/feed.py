"""The change feed: wakes long-polls and watch streams when the registry changes.

Long-polls, and watch streams catching up, each wait on a future of their own, which the next
change resolves: any number of waiters cost nothing until a change, and a burst of changes (an
eviction sweep) wakes each waiter once, not once per change. A long-poll's timeout is a timer
on the clock, not a task; watch streams' keepalives come from one feed-wide `beat`. Watch
streams that have caught up are written to by the fan-out (`registry.reads.fanout`) instead, without
waking at all. What changed is read from the delta journal by index; the feed keeps each
change's watch event encoded once for every stream that sends it, and each interest's hashcode
worked out once per registry index (registry/reads/interest.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable

import orjson

from registry.codec.json_codec import instance_dict
from registry.common.clock import Clock
from registry.common.hashcode import hash_of_counts
from registry.common.tasks import Loops
from registry.core.model import ChangeEvent, InstanceStatus
from registry.core.registry import Registry
from registry.core.subscriber import Loaded, Subscriber
from registry.reads.catalog import Catalog
from registry.reads.fanout import FanOut
from registry.reads.interest import AppStatuses, Interest
from registry.reads.journal import DeltaJournal, Entry
from registry.reads.watchers import Watchers

_KEEP_ENCODED = 10_000  # encoded events kept for streams that are behind
_KEEP_HASHCODES = 256  # interests' hashcodes kept (those of the current index, in practice)
KEEPALIVE = 15.0  # seconds between beats: an idle watch stream sends a comment on each


class ChangeFeed(Subscriber):
    def __init__(
        self, registry: Registry, clock: Clock, journal: DeltaJournal, catalog: Catalog
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._catalog = catalog
        self._waiting: set[asyncio.Future[None]] = set()
        self._encoded: dict[int, bytes] = {}
        self._bare: dict[int, bytes] = {}  # without a hashcode, for streams of some apps
        self._hashes: dict[int, str] = {}  # index: the registry's reconcile hash after it
        self._hashcodes: dict[tuple[Interest, int, str], str] = {}  # an interest's, by index
        self.statuses = AppStatuses(registry)
        self.fanout = FanOut(journal, self)
        self.streams = Watchers()  # open watch streams, by client, and those refused
        self.closed = False
        self.beats = 0  # keepalive beats so far
        self.polls = 0  # long-polls waiting

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: wake everyone waiting, and note the reconcile hash this change
        left for the streams to send with it (only while some are open: it costs a little)."""
        self.statuses.on_change(event)
        self.fanout.counted(event)
        if self.watchers:
            if len(self._hashes) >= 2 * _KEEP_ENCODED:
                for old in list(self._hashes)[:_KEEP_ENCODED]:
                    del self._hashes[old]
            self._hashes[event.index] = self._registry.reconcile_hash()
        # The fan-out first: it moves on to this change before any stream that wakes below
        # catches up to it, so that stream can join the live ones at once.
        self.fanout.changed()
        self._wake()

    def on_load(self, registry: Loaded) -> None:
        """Registry hook after a bulk load: wake everyone waiting."""
        self.statuses.clear()
        self.fanout.recount()
        self._wake()

    async def beating(self) -> AsyncIterator[None]:
        """The feed's beat while the server runs: idle watch streams send a comment every
        KEEPALIVE seconds, so that proxies keep them open."""
        async with Loops(self._clock) as loops:
            loops.every(KEEPALIVE, self.beat, name="keepalive")
            yield

    def beat(self) -> None:
        """Wake every stream so that an idle one sends a keepalive."""
        self.beats += 1
        self.fanout.beat()
        self._wake()

    def close(self) -> None:
        """The server is stopping: wake every waiter for good."""
        self.closed = True
        self._wake()
        self.fanout.release_all()

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, set()
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    async def next(self, timeout: float | None = None) -> None:
        """Wait for the next change, beat or close (or `timeout` seconds)."""
        if self.closed:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.add(waiter)
        timer = None if timeout is None else self._clock.call_later(timeout, _done(waiter))
        try:
            await waiter
        finally:
            self._waiting.discard(waiter)
            if timer is not None:
                timer.cancel()

    async def wait_past(self, index: int, timeout: float) -> bool:
        """Wait until the registry index passes `index`, `timeout` seconds have gone by or the
        feed closes; whether the index has passed."""
        deadline = self._clock.monotonic() + timeout
        while self._registry.index <= index and not self.closed:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            await self.next(remaining)
        return self._registry.index > index

    @property
    def waiting(self) -> int:
        """Long-polls and streams waiting for the next change now."""
        return len(self._waiting)

    @property
    def watchers(self) -> int:
        """Watch streams open now."""
        return self.streams.open

    @property
    def index(self) -> int:
        return self._registry.index

    def event_id(self, index: int) -> str:
        """A stream's event id: the index, and the epoch it belongs to."""
        return f"{index}@{self._registry.epoch}"

    def encoded(self, event: Entry) -> bytes:
        """A change as a Server-Sent Event, encoded once for every stream."""
        # The registry's hashcode: unknown for changes made while no stream was open.
        return self._kept(self._encoded, event, lambda: self._hashes.get(event.index))

    def encoded_bare(self, event: Entry) -> bytes:
        """A change without the registry's hashcode, encoded once for every stream that
        watches part of the registry (the whole registry's hashcode is not its copy's)."""
        return self._kept(self._bare, event, lambda: None)

    def _kept(
        self, kept: dict[int, bytes], event: Entry, hashcode: Callable[[], str | None]
    ) -> bytes:
        body = kept.get(event.index)
        if body is None:
            if len(kept) >= 2 * _KEEP_ENCODED:  # forget the older half
                for old in list(kept)[:_KEEP_ENCODED]:
                    del kept[old]
            body = kept[event.index] = self._encode(event, hashcode())
        return body

    def encoded_with(self, event: Entry, hashcode: str) -> bytes:
        """A change as a Server-Sent Event with `hashcode`: its bare form with the hashcode
        put in as the data's last field, so that the instance is encoded once whatever the
        hashcodes that streams of different interests send it with."""
        bare = self.encoded_bare(event)  # ends in b"}\n\n": the data's object, the event's end
        return b'%b,"hashcode":%b}\n\n' % (bare[:-3], orjson.dumps(hashcode))

    def hashcode(self, interest: Interest) -> str:
        """`interest`'s hashcode as the registry is now: worked out once per registry index
        for every stream with that interest."""
        registry, kept = self._registry, self._hashcodes
        key = (interest, registry.index, registry.epoch)
        found = kept.get(key)
        if found is None:
            if len(kept) >= _KEEP_HASHCODES:
                kept.clear()
            found = kept[key] = hash_of_counts(self.counts(interest))
        return found

    def counts(self, interest: Interest) -> Counter[InstanceStatus]:
        """The instances `interest` covers, as the registry is now, by status."""
        return interest.counts(self._registry, self._catalog, self.statuses)

    def _encode(self, event: Entry, hashcode: str | None) -> bytes:
        instance = event.lease.instance
        fields = {
            "index": event.index,
            "action": event.action.value,
            "app": instance.app,
            "instanceId": instance.instance_id,
            "instance": instance_dict(event.lease),
        }
        if hashcode is not None:
            fields["hashcode"] = hashcode
        data = orjson.dumps(fields)
        return sse(data, event=event.action.value, id=self.event_id(event.index))


def _done(waiter: asyncio.Future[None]) -> Callable[[], None]:
    def done() -> None:
        if not waiter.done():
            waiter.set_result(None)

    return done


def sse(data: bytes, *, event: str, id: str | None = None) -> bytes:
    """One Server-Sent Event; `data` is a single line of JSON."""
    head = f"event: {event}\n" if id is None else f"id: {id}\nevent: {event}\n"
    return head.encode() + b"data: " + data + b"\n\n"
