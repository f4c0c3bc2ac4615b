"""Writing each change to every caught-up watch stream from one place.

A watch stream that has sent everything up to the newest change is handed to the fan-out (it
is *live*) and its handler parks. When the registry changes, one task reads the new changes
from the journal, joins their events (each encoded once, by the feed) into one frame, and
writes that frame straight to every live stream's transport, `SLICE` streams per turn of the
event loop. At a thousand streams that is a thousand writes of the same bytes, where a wake-up
per stream cost a coroutine switch, a journal read, a join and aiohttp's write path each: the
last stream used to see a change tens of milliseconds after the first.

A stream goes back to its handler, which catches up by itself with aiohttp's back-pressure,
when writing to it is not a good idea: its transport is closing, or holds more than
`HIGH_WATER` bytes it could not send yet (a slow reader), or a burst of changes makes a frame
over `MAX_FRAME` bytes (a mass eviction: each stream then paces its own backlog). A frame is
what aiohttp itself would send: a chunk of the chunked body, or the bytes alone on an HTTP/1.0
stream, which has none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from registry.common.tasks import SLICE
from registry.health.histogram import Histogram
from registry.reads.journal import DeltaJournal, Entry

HIGH_WATER = 64 * 1024  # unsent bytes at which a stream is left to its handler's pacing
MAX_FRAME = 64 * 1024  # a larger burst is sent by each stream's handler, paced
KEEPALIVE_COMMENT = b": keepalive\n\n"  # what an idle stream is sent on a beat
# Upper bounds, in seconds, of the fan-out durations' buckets: finer where a thousand streams'
# writes fall on a small machine (tens of milliseconds).
BOUNDS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.1, 0.2, 0.5, 1.0)


class LiveStream:
    """One parked watch stream: where to write, and how to wake its handler."""

    __slots__ = ("chunked", "resumed", "transport")

    def __init__(
        self, transport: asyncio.WriteTransport, chunked: bool, resumed: asyncio.Future[int]
    ) -> None:
        self.transport = transport
        self.chunked = chunked
        self.resumed = resumed  # set to the index the stream has been sent up to


class FanOut:
    def __init__(self, journal: DeltaJournal, encoded: Callable[[Entry], bytes]) -> None:
        self._journal = journal
        self._encoded = encoded
        self._streams: dict[LiveStream, None] = {}
        self._position = 0  # the index every live stream has been sent (or is being sent) to
        self._keepalive = False
        self._task: asyncio.Task[None] | None = None
        self.frames = 0  # frames written, for tests: each is one write per live stream
        # Seconds from a change to the last write of its frame, on `/metrics`. Real time, as
        # the event-loop lag is: this watches the process, not the registry's clock.
        self.durations = Histogram(BOUNDS)
        self.timer = time.monotonic  # a test sets its own
        self._changed_at: float | None = None  # the first change not yet cut into a frame

    def __len__(self) -> int:
        return len(self._streams)

    async def park(
        self, transport: asyncio.WriteTransport | None, chunked: bool, position: int, latest: int
    ) -> int | None:
        """Hand a stream that has been sent everything up to `position` to the fan-out, when
        it can join (`latest` is the registry's index); wait until it has to go on by itself,
        and return the index it has been sent up to then. None when it cannot join: it is
        behind the live streams, or has no open transport."""
        if transport is None or transport.is_closing():
            return None
        while self._task is not None and position > self._position:
            await asyncio.shield(self._task)  # ahead of a fan-out under way: it catches up
        if self._streams or self._task is not None:
            if position != self._position:
                return None
        elif position == latest:
            self._position = position
        else:
            return None
        stream = LiveStream(transport, chunked, asyncio.get_running_loop().create_future())
        self._streams[stream] = None
        try:
            return await stream.resumed
        finally:
            self._streams.pop(stream, None)

    def changed(self) -> None:
        """The registry changed: send the new changes to every live stream."""
        if self._streams:
            if self._changed_at is None:
                self._changed_at = self.timer()
            self._start()

    def beat(self) -> None:
        """Send every live stream a keepalive comment."""
        if self._streams:
            self._keepalive = True
            self._start()

    def release_all(self) -> None:
        """Every live stream back to its handler (the server is stopping)."""
        for stream in list(self._streams):
            self._release(stream, self._position)

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fan-out")

    async def _run(self) -> None:
        try:
            while self._streams:
                changed_at, self._changed_at = self._changed_at, None
                events = self._journal.after(self._position)
                if events is None:  # forgotten already: each handler sends its reset
                    self.release_all()
                    return
                if events:
                    frame = b"".join(map(self._encoded, events))
                    if len(frame) > MAX_FRAME:
                        self.release_all()
                        return
                    sent, self._position = self._position, events[-1].index
                elif self._keepalive:
                    frame, sent = KEEPALIVE_COMMENT, self._position
                else:
                    return
                self._keepalive = False
                await self._write(frame, sent)
                if events and changed_at is not None:
                    self.durations.record(self.timer() - changed_at)
        finally:
            self._task = None

    async def _write(self, frame: bytes, sent: int) -> None:
        """Write `frame` to every stream live now; `sent`: the index they had before it."""
        chunk = b"%x\r\n%b\r\n" % (len(frame), frame)
        self.frames += 1
        streams = list(self._streams)
        for start in range(0, len(streams), SLICE):
            if start:
                await asyncio.sleep(0)  # let requests in between slices
            for stream in streams[start : start + SLICE]:
                if stream not in self._streams:  # left meanwhile
                    continue
                transport = stream.transport
                if transport.is_closing() or transport.get_write_buffer_size() > HIGH_WATER:
                    self._release(stream, sent)
                    continue
                try:
                    transport.write(chunk if stream.chunked else frame)
                except Exception:  # a transport that fails: its handler finds out, not the rest
                    self._release(stream, sent)

    def _release(self, stream: LiveStream, position: int) -> None:
        del self._streams[stream]
        if not stream.resumed.done():
            stream.resumed.set_result(position)
