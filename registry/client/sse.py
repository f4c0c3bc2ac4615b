"""Server-Sent Events read off a response body, as the HTML standard's parser reads them.

Only what the registry's watch stream uses is kept: lines ending in LF or CRLF (not a lone CR,
and no byte-order mark: our server writes neither), `id`, `event` and `data` fields (data lines
joined by newlines), comments skipped, an event dispatched at its blank line. `retry` is left
to the caller's own pause before it opens the stream again. The body is read as it arrives,
a chunk at a time rather than a line at a time: one wake-up for a whole event, or several.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: str
    id: str | None


async def events(stream: aiohttp.StreamReader, *, max_line: int = 1 << 16) -> AsyncIterator[Event]:
    """Each event of the stream, until it ends; ValueError for a line over `max_line` bytes."""
    parser = _Parser(max_line)
    async for chunk in stream.iter_any():
        for event in parser.feed(chunk):
            yield event


class _Parser:
    def __init__(self, max_line: int) -> None:
        self._max_line = max_line
        self._partial = b""  # the start of a line whose end has not come yet
        self._name = "message"
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> Iterator[Event]:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self._max_line:
            raise ValueError(f"an event line longer than {self._max_line} bytes")
        for raw in lines:
            line = raw.decode("utf-8").removesuffix("\r")
            if not line:
                if self._data:
                    yield Event(self._name, "\n".join(self._data), self._id)
                self._name, self._data = "message", []
            elif not line.startswith(":"):
                self._field(*line.partition(":")[::2])

    def _field(self, name: str, value: str) -> None:
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._name = value
        elif name == "id" and "\0" not in value:
            self._id = value
