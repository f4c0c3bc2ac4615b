"""Server-Sent Events read off a response body, as the HTML standard's parser reads them.

Only what the registry's watch stream uses is kept: lines ending in LF or CRLF (not a lone CR,
and no byte-order mark: our server writes neither), `id`, `event` and `data` fields (data lines
joined by newlines), comments skipped, an event dispatched at its blank line. `retry` is left
to the caller's own pause before it opens the stream again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: str
    id: str | None


async def events(stream: aiohttp.StreamReader) -> AsyncIterator[Event]:
    """Each event of the stream, until it ends."""
    name, last_id = "message", None
    data: list[str] = []
    async for raw in stream:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield Event(name, "\n".join(data), last_id)
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id" and "\0" not in value:
            last_id = value
