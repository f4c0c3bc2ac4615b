"""Choosing formats and reading bodies the way Eureka clients expect (contract 2)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import StreamWriter
from aiohttp.payload import Payload

from registry.appkeys import CACHE, CLOCK
from registry.codec import Format, json_codec, xml_codec
from registry.codec.wire import INDEX_HEADER
from registry.errors import BadInput, UnsupportedMediaType
from registry.http.request_body import read_body
from registry.reads.cache import Key
from registry.reads.encoded import Document, coalesced

_READABLE_CHARSETS = (None, "utf-8", "utf8", "iso-8859-1")
EUREKA_ACCEPT = "X-Eureka-Accept"
# Types that say nothing about the body (HTTP libraries' and curl's defaults): look at it instead.
_UNSPECIFIED = ("application/octet-stream", "application/x-www-form-urlencoded")


def response_format(request: web.Request) -> Format:
    """JSON when Accept mentions json anywhere, otherwise XML (no Accept header means XML)."""
    return Format.JSON if "json" in request.headers.get(hdrs.ACCEPT, "") else Format.XML


def document_format(request: web.Request) -> Format:
    """`response_format`, compact when `X-Eureka-Accept: compact` asks (as Eureka: for the
    registry, its delta, an application and VIPs; any other value means full)."""
    fmt = response_format(request)
    if request.headers.get(EUREKA_ACCEPT, "").lower() == "compact":
        return fmt.compacted()
    return fmt


async def cached_payload(
    request: web.Request,
    key: Key,
    fmt: Format,
    build: Callable[[], Document | None],
    *,
    prepare: Callable[[], Awaitable[None]] | None = None,
    otherwise: Callable[[], Document] | None = None,
) -> web.Response:
    """A cached document (put together by `build` on a miss), gzipped when asked.

    On a miss, `prepare` first encodes what the document lacks a little at a time, so the
    synchronous `build` costs the loop only what changed meanwhile. Its `X-Registry-Index` is
    the index the document shows, which is older than the registry's when Eureka's read-only
    cache layer serves it. When `build` finds nothing to show, the answer is what `otherwise`
    makes, not kept (a VIP no instance has).
    """
    state, full_key = request.app, (*key, fmt)
    cache, clock = state[CACHE], state[CLOCK]
    if prepare is not None and not cache.holds(full_key, now=clock.monotonic()):
        await prepare()
    document = cache.get(full_key, build, now=clock.monotonic())
    if document is None:
        if otherwise is None:
            raise RuntimeError(f"nothing to answer for {key}")
        document = otherwise()
    return await document_response(request, fmt, document)


async def document_response(request: web.Request, fmt: Format, document: Document) -> web.Response:
    """`document` as the answer, gzipped when asked."""
    headers = {INDEX_HEADER: str(document.index)}
    pieces: Sequence[bytes | memoryview]
    if "gzip" in request.headers.get(hdrs.ACCEPT_ENCODING, ""):
        headers[hdrs.CONTENT_ENCODING] = "gzip"
        pieces = document.gzip or await document.gzipped()
    else:
        pieces = document.pieces()
    if len(pieces) == 1:
        return web.Response(body=pieces[0], content_type=fmt.content_type, headers=headers)
    return web.Response(body=Pieces(pieces, fmt.content_type), headers=headers)


class Pieces(Payload):
    """A response body sent as the pieces it is kept in, without a copy into one buffer.

    uvloop's transport takes them all in one call: one writev, and what the socket does not
    take at once is queued as the pieces themselves. Other transports get them joined into a
    few large writes for each client (asyncio's `writelines` joins them itself before Python
    3.12, and aiohttp avoids it before 3.12.9 for a bug)."""

    def __init__(self, pieces: Sequence[bytes | memoryview], content_type: str) -> None:
        super().__init__(pieces, content_type=content_type)
        self._pieces = pieces
        self._size = sum(len(piece) for piece in pieces)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._pieces).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        pieces = self._pieces
        transport = _taking_pieces(writer)
        if transport is None:
            for piece in coalesced(pieces):
                await writer.write(piece)
            return
        await writer.write(pieces[0])  # through aiohttp's writer: the headers go out with it
        rest = pieces[1:]
        writer.output_size += sum(len(piece) for piece in rest)  # what aiohttp counts as sent
        transport.writelines(rest)
        await writer.drain()  # the transport's flow control: paused while it holds too much

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        await self.write(writer)  # the length is always the whole: no ranges here


def _taking_pieces(writer: AbstractStreamWriter) -> asyncio.Transport | None:
    """`writer`'s transport, if pieces can go to it as they are: uvloop's, open, and with no
    chunked encoding to frame them in."""
    if not isinstance(writer, StreamWriter) or writer.chunked:
        return None
    transport = writer.transport
    if transport is None or transport.is_closing():
        return None
    return transport if type(transport).__module__.startswith("uvloop") else None


def payload(request: web.Request, fmt: Format, body: bytes, *, status: int = 200) -> web.Response:
    """A response carrying an encoded document, gzipped when the client asks for it."""
    response = web.Response(body=body, status=status, content_type=fmt.content_type)
    if "gzip" in request.headers.get(hdrs.ACCEPT_ENCODING, ""):
        response.enable_compression(web.ContentCoding.gzip)
    return response


async def read_document(request: web.Request, *, root: str) -> Any:
    """The request body as a wire dict, from JSON or XML as its Content-Type says.

    Without a telling Content-Type the body's first character decides. The body is read
    within its bounds of size and time, and inflated when compressed (`request_body`).
    """
    body = await read_body(request)
    if not body.strip():
        raise BadInput("body", "the request body is empty")
    fmt = _body_format(request, body)
    latin1 = request.charset is not None and request.charset.lower() == "iso-8859-1"
    if fmt is Format.XML:
        return xml_codec.decode(body.decode("iso-8859-1") if latin1 else body, root=root)
    document = json_codec.decode(body.decode("iso-8859-1").encode() if latin1 else body)
    if isinstance(document, dict) and root in document:
        return document[root]
    return document  # lenient: an unwrapped instance is read as if wrapped


def _body_format(request: web.Request, body: bytes) -> Format:
    charset = request.charset.lower() if request.charset else None
    if charset not in _READABLE_CHARSETS:
        raise UnsupportedMediaType("Content-Type", f"charset {charset!r} is not supported")
    media = request.content_type.lower()
    if hdrs.CONTENT_TYPE not in request.headers or media in _UNSPECIFIED:
        return Format.XML if body.lstrip().startswith(b"<") else Format.JSON
    if media == "application/json" or media.endswith("+json"):
        return Format.JSON
    if media in ("application/xml", "text/xml") or media.endswith("+xml"):
        return Format.XML
    raise UnsupportedMediaType(
        "Content-Type", f"{media!r} is not supported; send application/json or application/xml"
    )
