"""Server-Sent Events read off a response body, as the HTML standard's parser reads them."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import pytest

from registry.client.sse import Event, events


def _stream() -> aiohttp.StreamReader:
    # A mock of aiohttp's protocol: the reader only asks it whether reading is paused.
    protocol = mock.Mock(_reading_paused=False)
    return aiohttp.StreamReader(protocol=protocol, limit=2**16, loop=asyncio.get_running_loop())


async def _read(*chunks: bytes) -> list[Event]:
    """The events of a body that arrives in `chunks` and then ends."""
    stream = _stream()
    for chunk in chunks:
        stream.feed_data(chunk)
    stream.feed_eof()
    return [event async for event in events(stream)]


class TestFields:
    async def test_id_event_and_data(self):
        """An event carries its name, data and id."""
        body = b'id: 7\nevent: change\ndata: {"app": "ORDERS"}\n\n'
        assert [Event("change", '{"app": "ORDERS"}', "7")] == await _read(body)

    async def test_defaults(self):
        """An event without name or id is a `message` without id."""
        assert [Event("message", "hello", None)] == await _read(b"data: hello\n\n")

    async def test_one_leading_space_is_dropped(self):
        """Only one space after the colon is dropped, and none is needed."""
        body = b"data:tight\n\ndata:  spaced\n\n"
        assert ["tight", " spaced"] == [e.data for e in await _read(body)]

    async def test_multi_line_data_is_joined_with_newlines(self):
        """Several data lines make one data joined by newlines."""
        body = b"data: one\ndata: two\ndata:\ndata: four\n\n"
        assert [Event("message", "one\ntwo\n\nfour", None)] == await _read(body)

    async def test_unknown_fields_are_ignored(self):
        """A field the reader does not know, such as `retry`, is ignored."""
        assert [Event("message", "x", None)] == await _read(b"retry: 1000\nfoo: bar\ndata: x\n\n")

    async def test_name_does_not_carry_over(self):
        """An event's name is its own: the next event is a `message` again."""
        body = b"event: change\ndata: a\n\ndata: b\n\n"
        assert ["change", "message"] == [e.name for e in await _read(body)]


class TestLines:
    async def test_comments_are_skipped(self):
        """Comment lines are skipped, and a block of comments alone is no event."""
        body = b": keep-alive\n\n: note\ndata: x\n: more\n\n"
        assert [Event("message", "x", None)] == await _read(body)

    async def test_crlf_line_ends(self):
        """Lines ending in CRLF read as lines ending in LF."""
        body = b"id: 3\r\nevent: change\r\ndata: a\r\ndata: b\r\n\r\n"
        assert [Event("change", "a\nb", "3")] == await _read(body)

    async def test_lines_split_across_chunks(self):
        """Lines and UTF-8 characters split across chunks are read whole."""
        body = "event: change\ndata: café\n\n".encode()
        chunks = [body[i : i + 1] for i in range(len(body))]
        assert [Event("change", "café", None)] == await _read(*chunks)

    async def test_events_are_dispatched_before_the_stream_ends(self):
        """An event is given at its blank line, without waiting for more of the stream."""
        stream = _stream()
        stream.feed_data(b"data: first\n\n")
        reader = events(stream)
        first = await asyncio.wait_for(anext(reader), timeout=5)
        stream.feed_data(b"data: second\n\n")
        stream.feed_eof()
        assert ["first", "second"] == [first.data] + [e.data async for e in reader]


class TestDispatch:
    async def test_event_without_data_is_not_dispatched(self):
        """A block with a name and id but no data gives no event."""
        assert [] == await _read(b"event: ping\nid: 1\n\n")

    async def test_id_is_kept_for_later_events(self):
        """An id holds for the events after it, even when set in a block without data."""
        body = b"id: 1\ndata: a\n\ndata: b\n\nid: 5\n\ndata: c\n\n"
        assert [("a", "1"), ("b", "1"), ("c", "5")] == [(e.data, e.id) for e in await _read(body)]

    async def test_empty_id_resets_the_id(self):
        """An empty id field sets the last id to the empty string."""
        body = b"id: 1\ndata: a\n\nid\ndata: b\n\n"
        assert ["1", ""] == [e.id for e in await _read(body)]

    async def test_id_with_nul_is_ignored(self):
        """An id holding a NUL character leaves the last id as it was."""
        body = b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"
        assert ["1", "1"] == [e.id for e in await _read(body)]

    async def test_final_event_without_blank_line_is_not_dispatched(self):
        """An event cut off by the end of the stream before its blank line is dropped."""
        assert ["a"] == [e.data for e in await _read(b"data: a\n\ndata: b\n")]
        assert ["a"] == [e.data for e in await _read(b"data: a\n\ndata: b")]

    async def test_empty_stream_gives_nothing(self):
        """A stream that ends at once gives no event."""
        assert [] == await _read()


class TestLineLength:
    async def test_a_line_over_the_limit_is_refused(self):
        """A line longer than `max_line` is an error, not a buffer that grows for ever."""
        stream = _stream()
        stream.feed_data(b"data: " + b"x" * 100)
        stream.feed_eof()
        with pytest.raises(ValueError, match="longer than 64 bytes"):
            [event async for event in events(stream, max_line=64)]

    async def test_a_long_line_within_the_limit_arrives_in_pieces(self):
        """An event split over many chunks is put together whole."""
        body = b"data: " + b"y" * 10_000 + b"\n\n"
        chunks = [body[i : i + 100] for i in range(0, len(body), 100)]
        assert [10_000] == [len(e.data) for e in await _read(*chunks)]
