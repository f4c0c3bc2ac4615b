"""The fan-out on its own: a real registry, journal and feed; the streams' transports are
stand-ins for asyncio's that record what is written and can play a slow or gone reader.
(The HTTP side, with real sockets, is in tests/http/test_watch_api.py.)"""

from __future__ import annotations

import asyncio
import itertools
import random

import orjson

from registry.common.clock import FakeClock
from registry.common.hashcode import hash_of_counts, reconcile_hash
from registry.common.tasks import SLICE
from registry.core.registry import Registry
from registry.reads import fanout
from registry.reads.catalog import Catalog
from registry.reads.feed import ChangeFeed
from registry.reads.interest import Interest
from registry.reads.journal import DeltaJournal, Entry
from rules import InstanceStatus
from tests.factories import T0, make
from tests.helpers import eventually


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

    @classmethod
    def of(cls, data: bytes) -> Transport:
        """A transport that was written `data` alone."""
        transport = cls()
        transport.written.append(data)
        return transport


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
    for _ in range(200):  # the fan-out paces itself by time: a loaded machine takes more turns
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


def watching(
    feed: ChangeFeed, transport: Transport, interest: Interest, position: int = 0
) -> asyncio.Task[int | None]:
    return asyncio.ensure_future(feed.fanout.park(transport, False, position, feed.index, interest))


def interest(apps: tuple[str, ...] = (), vips: tuple[str, ...] = ()) -> Interest:
    return Interest(frozenset(apps), frozenset(vips))


def events_of(transport: Transport) -> list[dict[str, object]]:
    """The data of each event written (comments and `id`-only blocks left out)."""
    data = b"".join(transport.written)
    return [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]


class TestSubscriptions:
    async def test_streams_of_one_interest_share_one_frame_and_others_get_theirs(self):
        registry, feed, _ = fed()
        orders = [Transport() for _ in range(3)]
        billing, everything = Transport(), Transport()
        parked = [watching(feed, t, interest(("ORDERS",))) for t in orders]
        parked += [watching(feed, billing, interest(("BILLING",))), park(feed, everything, 0)]
        await settle()
        assert (5, 3) == (len(feed.fanout), feed.fanout.subscriptions)
        register(registry, 1, app="ORDERS")
        await settle()
        assert 1 == len({b"".join(t.written) for t in orders})
        assert [{"instanceId": "i-1", "hashcode": "UP_1_"}] == [
            {key: event[key] for key in ("instanceId", "hashcode")}
            for event in events_of(orders[0])
        ]
        assert ([], [1]) == (billing.written, indices(everything))
        register(registry, 2, app="BILLING")
        await settle()
        assert (["i-2"], [1, 2]) == (
            [event["instanceId"] for event in events_of(billing)],
            indices(everything),
        )
        assert 1 == len(orders[0].written)
        feed.close()
        await asyncio.gather(*parked)
        assert 0 == feed.fanout.subscriptions

    async def test_a_change_is_encoded_once_whatever_the_interests_that_want_it(self):
        """Fifty interests, each with its own hashcode: the instance is encoded once, and
        each frame is what encoding it whole with that hashcode gives."""
        registry, feed, journal = fed()
        register(registry, 0, app="ORDERS", status=InstanceStatus.DOWN)
        for k in range(50):  # the interests differ in what they count: APPk has k instances
            for j in range(k):
                register(registry, 100 * k + j, app=f"APP{k}")
        transports = [Transport() for _ in range(50)]
        parked = [
            watching(feed, t, interest(("ORDERS", *(f"APP{n}" for n in range(k)))), feed.index)
            for k, t in enumerate(transports)
        ]
        await settle()
        encodings = 0
        encode = feed._encode

        def counted(event: Entry, hashcode: str | None) -> bytes:
            nonlocal encodings
            encodings += 1
            return encode(event, hashcode)

        feed._encode = counted  # type: ignore[method-assign]
        register(registry, 1, app="ORDERS")
        await settle()
        assert 1 == encodings
        (event,) = journal.after(feed.index - 1) or []
        for k, transport in enumerate(transports):
            hashcode = reconcile_hash(
                [InstanceStatus.DOWN, InstanceStatus.UP] + [InstanceStatus.UP] * (k * (k - 1) // 2)
            )
            assert [encode(event, hashcode)] == transport.written
        feed.close()
        await asyncio.gather(*parked)

    async def test_a_subscriptions_hashcode_follows_what_it_watches(self):
        """Registrations, a status change, an instance joining and leaving a watched VIP and a
        cancel: each event's hashcode is the reconcile hash of the registry's matching
        instances counted afresh."""
        registry, feed, _ = fed()
        watched = interest(("ORDERS",), ("checkout",))
        transport = Transport()
        parked = watching(feed, transport, watched)
        await settle()
        changes = [
            lambda: register(registry, 1, app="ORDERS"),
            lambda: register(registry, 2, app="BILLING"),
            lambda: register(registry, 3, app="CARTS", vip_address="carts,checkout"),
            lambda: registry.register(
                make("i-1", "ORDERS", InstanceStatus.DOWN, dirty=T0 + 50), now_ms=T0 + 50
            ),
            lambda: registry.register(
                make("i-3", "CARTS", dirty=T0 + 60, vip_address="carts"), now_ms=T0 + 60
            ),
            lambda: register(registry, 4, app="CARTS", secure_vip_address="checkout"),
            lambda: registry.cancel("ORDERS", "i-1", now_ms=T0 + 70),
        ]
        expected = []
        for change in changes:
            change()
            await settle()
            expected.append(
                reconcile_hash(
                    lease.instance.status
                    for lease in registry.leases()
                    if watched.matches(lease.instance)
                )
            )
        sent = [event.get("hashcode") for event in events_of(transport)]
        del expected[1]  # BILLING's change is not sent
        assert expected == sent
        assert ["UP_1_", "UP_2_", "DOWN_1_UP_1_", "DOWN_1_", "DOWN_1_UP_1_", "UP_1_"] == sent
        feed.close()
        await parked

    async def test_a_subscription_that_changes_skip_is_moved_on_at_the_beat(self):
        registry, feed, _ = fed()
        quiet, everything = Transport(), Transport()
        parked = [watching(feed, quiet, interest(("ORDERS",))), park(feed, everything, 0)]
        await settle()
        register(registry, 1, app="BILLING")
        await settle()
        assert ([], [1]) == (quiet.written, indices(everything))
        feed.beat()
        await settle()
        event_id = feed.event_id(1).encode()
        assert [b": keepalive\nid: " + event_id + b"\n\n"] == quiet.written
        assert fanout.KEEPALIVE_COMMENT in everything.written[-1]
        feed.close()
        await asyncio.gather(*parked)

    async def test_a_subscription_with_a_burst_over_the_frame_limit_alone_goes_back(self):
        registry, feed, _ = fed()
        big, small = Transport(), Transport()
        parked_big = watching(feed, big, interest(("BIG",)))
        parked_small = watching(feed, small, interest(("SMALL",)))
        await settle()
        blob = {"metadata": {"blob": "x" * 4096}}
        for k in range(1, fanout.MAX_FRAME // 4096 + 2):
            register(registry, k, app="BIG", **blob)
        register(registry, 1000, app="SMALL")
        await settle()
        assert (0, []) == (await parked_big, big.written)
        assert ["i-1000"] == [event["instanceId"] for event in events_of(small)]
        assert (1, False) == (len(feed.fanout), parked_small.done())
        feed.close()
        await parked_small

    async def test_a_long_round_while_changes_came_is_followed_by_a_rest_and_they_join(self):
        """A round that took longer than `rest_after` (here each is timed 20 ms) while a
        change came is followed by a rest as long; that change and one made in another turn
        of the loop during the rest go out in one frame."""
        registry, feed, _ = fed()
        feed.fanout.work_timer = itertools.count(step=0.02).__next__
        transports = [Transport() for _ in range(SLICE + 1)]  # two slices: a turn between
        parked = [park(feed, t, 0) for t in transports]
        await settle()
        register(registry, 1)
        await asyncio.sleep(0)  # the first slice is written; the fan-out gives a turn
        register(registry, 2)
        await settle()
        assert 1 == feed.fanout.rests
        register(registry, 3)
        last = transports[-1]
        await eventually(lambda: len(last.written), lambda writes: writes == 2)
        assert ([[1], [2, 3]], 2) == (
            [indices(Transport.of(chunk)) for chunk in last.written],
            feed.fanout.frames,
        )
        feed.close()
        await asyncio.gather(*parked)

    async def test_a_change_alone_is_not_held_back_by_a_rest(self):
        """A long round after which nothing had changed rests not: the next change goes out
        at once."""
        registry, feed, _ = fed()
        feed.fanout.work_timer = itertools.count(step=0.02).__next__
        transport = Transport()
        parked = park(feed, transport, 0)
        await settle()
        for k in (1, 2):
            register(registry, k)
            await settle()
        assert ([1, 2], 0) == (indices(transport), feed.fanout.rests)
        feed.close()
        await parked


class TestAppStatuses:
    def test_an_applications_counts_follow_its_changes_and_go_when_it_empties(self):
        registry, feed, _ = fed()
        statuses = feed.statuses
        assert ({}, 0) == (dict(statuses.of("ORDERS")), len(statuses))  # none: not kept
        register(registry, 1, app="ORDERS")
        assert {InstanceStatus.UP: 1} == dict(statuses.of("ORDERS"))
        register(registry, 2, app="ORDERS", status=InstanceStatus.DOWN)
        registry.register(make("i-1", "ORDERS", InstanceStatus.DOWN, dirty=T0 + 9), now_ms=T0 + 9)
        assert "DOWN_2_" == hash_of_counts(statuses.of("ORDERS"))
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 10)
        registry.cancel("ORDERS", "i-2", now_ms=T0 + 10)
        assert 0 == len(statuses)
        register(registry, 3, app="ORDERS")
        assert "UP_1_" == hash_of_counts(statuses.of("ORDERS"))
