"""The fan-out on its own: a real registry, journal and feed; the streams' transports are
stand-ins for asyncio's that record what is written and can play a slow or gone reader.
(The HTTP side, with real sockets, is in tests/http/test_watch_api.py.)"""

from __future__ import annotations

import asyncio
import random

from registry.common.clock import FakeClock
from registry.common.tasks import SLICE
from registry.core.registry import Registry
from registry.reads import fanout
from registry.reads.catalog import Catalog
from registry.reads.feed import ChangeFeed
from registry.reads.journal import DeltaJournal
from tests.factories import T0, make


class Transport(asyncio.WriteTransport):
    """What the fan-out uses of a transport: writes kept, and a backlog or a close to play."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.backlog = 0
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def is_closing(self) -> bool:
        return self.closing


def fed() -> tuple[Registry, ChangeFeed, DeltaJournal]:
    registry = Registry()
    journal = DeltaJournal(retention_ms=180_000)
    catalog = Catalog(registry, max_age=30)
    feed = ChangeFeed(registry, FakeClock(), journal, catalog)
    registry.subscribe(journal)
    registry.subscribe(catalog)
    registry.subscribe(feed)
    return registry, feed, journal


def register(registry: Registry, k: int, **fields: object) -> None:
    registry.register(make(f"i-{k}", **fields), now_ms=T0 + k)  # type: ignore[arg-type]


def indices(transport: Transport) -> list[int]:
    """The registry indices of the events written, in order (ids are `index@epoch`)."""
    data = b"".join(transport.written)
    return [int(line[4:].split(b"@")[0]) for line in data.split(b"\n") if line[:4] == b"id: "]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def park(feed: ChangeFeed, transport: Transport, position: int) -> asyncio.Task[int | None]:
    return asyncio.ensure_future(feed.fanout.park(transport, True, position, feed.index))


class TestParking:
    async def test_a_caught_up_stream_is_written_each_change_once_chunked(self):
        registry, feed, journal = fed()
        transport = Transport()
        parked = park(feed, transport, 0)
        await settle()
        assert 1 == len(feed.fanout)
        register(registry, 1)
        await settle()
        assert [1] == indices(transport)
        (chunk,) = transport.written
        size, _, rest = chunk.partition(b"\r\n")
        assert (int(size, 16), b"\r\n") == (len(rest) - 2, rest[-2:])
        (event,) = journal.after(0) or []
        assert rest[:-2] == feed.encoded(event)
        assert not parked.done()
        feed.close()
        assert 1 == await parked

    async def test_a_stream_without_chunks_gets_the_events_alone(self):
        registry, feed, _ = fed()
        transport = Transport()
        parked = asyncio.ensure_future(feed.fanout.park(transport, False, 0, 0))
        await settle()
        register(registry, 1)
        await settle()
        assert transport.written[0].startswith(b"id: 1@")
        feed.close()
        await parked

    async def test_a_burst_in_one_turn_is_one_write_per_stream(self):
        """Changes made before the fan-out runs go out joined: one frame, one write each."""
        registry, feed, _ = fed()
        transports = [Transport() for _ in range(3)]
        parked = [park(feed, t, 0) for t in transports]
        await settle()
        for k in range(1, 6):
            register(registry, k)
        await settle()
        assert 1 == feed.fanout.frames
        assert [[1, 2, 3, 4, 5]] * 3 == [indices(t) for t in transports]
        assert [1, 1, 1] == [len(t.written) for t in transports]
        feed.close()
        await asyncio.gather(*parked)

    async def test_a_stream_behind_the_registry_is_not_taken(self):
        registry, feed, _ = fed()
        register(registry, 1)
        assert await feed.fanout.park(Transport(), True, 0, feed.index) is None

    async def test_a_stream_behind_the_live_ones_is_not_taken(self):
        registry, feed, _ = fed()
        register(registry, 1)
        live = park(feed, Transport(), 1)
        await settle()
        assert await feed.fanout.park(Transport(), True, 0, feed.index) is None
        feed.close()
        assert 1 == await live

    async def test_a_closed_transport_is_not_taken(self):
        _, feed, _ = fed()
        transport = Transport()
        transport.closing = True
        assert await feed.fanout.park(transport, True, 0, 0) is None
        assert await feed.fanout.park(None, True, 0, 0) is None

    async def test_a_stream_ahead_of_a_fan_out_under_way_joins_once_it_is_done(self):
        """A change came while a fan-out was between slices of streams; a stream that caught
        up to it by itself waits for the fan-out to move on to it, then joins."""
        registry, feed, _ = fed()
        live = [Transport() for _ in range(2 * SLICE + 1)]  # three slices
        parked = [park(feed, t, 0) for t in live]
        await settle()
        register(registry, 1)
        await asyncio.sleep(0)  # the fan-out has written its first slice and given a turn
        assert ([1], []) == (indices(live[0]), indices(live[-1]))
        register(registry, 2)
        ahead = Transport()
        joined = asyncio.ensure_future(feed.fanout.park(ahead, True, 2, feed.index))
        await settle()
        assert (2 * SLICE + 2, [1, 2], []) == (len(feed.fanout), indices(live[-1]), ahead.written)
        register(registry, 3)
        await settle()
        assert [3] == indices(ahead)
        feed.close()
        assert {3} == {await p for p in [*parked, joined]}


class TestHandedBack:
    async def test_a_slow_reader_goes_back_to_its_handler_at_the_index_it_was_sent(self):
        registry, feed, _ = fed()
        slow, quick = Transport(), Transport()
        parked_slow, parked_quick = park(feed, slow, 0), park(feed, quick, 0)
        await settle()
        register(registry, 1)
        await settle()
        slow.backlog = fanout.HIGH_WATER + 1
        register(registry, 2)
        await settle()
        assert (1, [1], [1, 2]) == (await parked_slow, indices(slow), indices(quick))
        assert not parked_quick.done()
        feed.close()

    async def test_a_gone_reader_goes_back_too(self):
        registry, feed, _ = fed()
        transport = Transport()
        parked = park(feed, transport, 0)
        await settle()
        transport.closing = True
        register(registry, 1)
        await settle()
        assert (0, []) == (await parked, transport.written)
        assert 0 == len(feed.fanout)

    async def test_a_transport_that_fails_goes_back_alone(self):
        registry, feed, _ = fed()
        broken, fine = Transport(), Transport()

        def refuse(data: bytes | bytearray | memoryview) -> None:
            raise RuntimeError("the transport is gone")

        broken.write = refuse  # type: ignore[method-assign]
        parked = [park(feed, broken, 0), park(feed, fine, 0)]
        await settle()
        register(registry, 1)
        await settle()
        assert (0, [1]) == (await parked[0], indices(fine))
        assert not parked[1].done()
        feed.close()

    async def test_a_burst_over_the_frame_limit_is_left_to_each_handler(self):
        """A mass eviction's hundreds of events are not copied into every transport at once."""
        registry, feed, _ = fed()
        transports = [Transport() for _ in range(2)]
        parked = [park(feed, t, 0) for t in transports]
        await settle()
        big = {"metadata": {"blob": "x" * 4096}}
        for k in range(1, fanout.MAX_FRAME // 4096 + 2):
            register(registry, k, **big)
        await settle()
        assert [0, 0] == [await p for p in parked]
        assert [[], []] == [t.written for t in transports]

    async def test_keepalives_reach_live_streams(self):
        _, feed, _ = fed()
        transport = Transport()
        parked = park(feed, transport, 0)
        await settle()
        feed.beat()
        await settle()
        comment = fanout.KEEPALIVE_COMMENT
        assert [b"%x\r\n%b\r\n" % (len(comment), comment)] == transport.written
        feed.close()
        await parked

    async def test_each_frame_is_timed_from_its_first_change_to_its_last_write(self):
        """One duration a frame, from the first change it carries: a burst is one; a
        keepalive, which carries no change, none."""
        registry, feed, _ = fed()
        times = [10.0, 10.004, 20.0, 20.028]  # each call of the timer takes the next
        feed.fanout.timer = lambda: times.pop(0)
        parked = park(feed, Transport(), 0)
        await settle()
        register(registry, 1)
        await settle()
        feed.beat()
        await settle()
        register(registry, 2)
        register(registry, 3)
        await settle()
        durations = feed.fanout.durations
        assert ([], 2, 2) == (times, durations.count, feed.fanout.frames - 1)
        assert 1 == durations.buckets[fanout.BOUNDS.index(0.005)]
        assert 1 == durations.buckets[fanout.BOUNDS.index(0.03)]
        assert abs(durations.total - 0.032) < 1e-9
        feed.close()
        await parked

    async def test_a_cancelled_handler_leaves_the_live_streams(self):
        _, feed, _ = fed()
        parked = park(feed, Transport(), 0)
        await settle()
        parked.cancel()
        await settle()
        assert 0 == len(feed.fanout)


class TestOrder:
    async def test_every_stream_gets_every_change_once_in_order(self):
        """Streams joining, falling behind and catching up, and leaving, while changes come
        in bursts: each transport holds consecutive indices, whoever wrote them. A stream's
        own catch-up is played by writing the journal's events itself, as its handler does."""
        registry, feed, journal = fed()
        rng = random.Random(7)
        transports = [Transport() for _ in range(40)]
        handed_back = 0

        async def stream(transport: Transport) -> None:
            nonlocal handed_back
            position = 0
            while not feed.closed:
                events = journal.after(position)
                assert events is not None
                if events:
                    transport.written.append(b"".join(map(feed.encoded, events)))
                    position = events[-1].index
                    await asyncio.sleep(0)
                    continue
                if rng.random() < 0.2:  # a slow reader for a while
                    transport.backlog = fanout.HIGH_WATER + 1
                sent = await feed.fanout.park(transport, False, position, feed.index)
                transport.backlog = 0
                if sent is None:
                    await feed.next()
                else:
                    position = sent
                    handed_back += not feed.closed

        handlers = [asyncio.ensure_future(stream(t)) for t in transports]
        k = 0
        for _ in range(60):
            for _ in range(rng.randint(1, 4)):
                k += 1
                register(registry, k)
            for _ in range(rng.randint(0, 6)):
                await asyncio.sleep(0)
        await settle()
        feed.close()
        await asyncio.gather(*handlers)
        assert all(indices(t) == list(range(1, k + 1)) for t in transports)
        assert feed.fanout.frames > 20 and handed_back > 5  # both ways were taken, often
