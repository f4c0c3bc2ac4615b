"""A request's body, read only by a handler that wants it: bounded in size and in time, and
inflated here, never by aiohttp.

aiohttp's server inflates a compressed body as it arrives, and after answering a request whose
body no handler read it drains that body for `lingering_time`, inflating it too: a gzip bomb of
1 GB of zeros (1 MB on the wire) sent to any path, without credentials, cost a second of the
event loop. So the server runs with `auto_decompress=False` (`serving.SERVER_OPTIONS`): what it
drains is raw bytes, and the one body that is inflated is the one a handler reads, up to
`limits.max_body_bytes` of output.

A peer's signed request (registry/http/peer_signatures.py) names its body's digest; the body
read here is checked against it before anything is made of it, so a signature captured with
one body cannot carry another.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import zlib

from aiohttp import hdrs, web

from registry.codec.peer_signature import body_digest
from registry.errors import (
    BadInput,
    BodyTooLarge,
    BodyTooSlow,
    Unauthorized,
    UnsupportedMediaType,
)

# The body digest a peer's verified signature names (the bytes on the wire)
SIGNED_BODY = web.RequestKey("signed_body", str)

# Seconds a body may take to arrive once a handler asks for it (a stock client sends its
# few KB at once; a body trickled in holds a connection and a handler).
BODY_TIMEOUT = 10.0

# Content-Encoding -> zlib's wbits: gzip; zlib's own format, as HTTP's "deflate" means; raw
# deflate, which some clients send as "deflate" too (tried when zlib's format fails).
_GZIP, _ZLIB, _RAW = 31, 15, -15
_ENCODINGS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": _ZLIB}


async def read_body(request: web.Request) -> bytes:
    """The body, inflated as its Content-Encoding says; BadInput (a 4xx) when it is larger
    than the application's `client_max_size` (compressed or not), slower than BODY_TIMEOUT,
    not what its Content-Encoding says, or in an encoding we do not read."""
    limit = request.client_max_size
    encoding = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    if encoding not in _ENCODINGS and encoding not in ("identity", ""):
        raise UnsupportedMediaType(
            "Content-Encoding", f"{encoding!r} is not read here: send gzip, deflate or none"
        )
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)  # at once: not after waiting for what was announced
    try:
        if request.content.is_eof():  # all here already (a stock client's body, mostly): no timer
            body = await request.read()
        else:
            async with asyncio.timeout(BODY_TIMEOUT):
                body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None
    except TimeoutError:
        raise BodyTooSlow(
            "body", f"the request body did not arrive within {BODY_TIMEOUT:g} s"
        ) from None
    signed = request.get(SIGNED_BODY)
    if signed is not None and not hmac.compare_digest(body_digest(body), signed):
        raise Unauthorized(
            "the request's body is not the one its Registry-Peer signature names",
            challenges=['Registry-Peer realm="service-registry"'],
        )
    if encoding not in _ENCODINGS:
        return body
    return _inflated(body, encoding, limit)


def _inflated(body: bytes, encoding: str, limit: int) -> bytes:
    wbits = _ENCODINGS[encoding]
    try:
        return _inflate(body, wbits, encoding, limit)
    except zlib.error as exc:
        if wbits == _ZLIB:  # "deflate" sent without zlib's header, as some clients do
            with contextlib.suppress(zlib.error):
                return _inflate(body, _RAW, encoding, limit)
        raise BadInput("body", f"the body is not valid {encoding}: {exc}") from None


def _inflate(body: bytes, wbits: int, encoding: str, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    inflated = inflater.decompress(body, limit + 1)  # one byte more tells "too large"
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise _too_large(limit, inflated=True)
    if not inflater.eof:
        raise BadInput("body", f"the {encoding} body is cut short")
    if inflater.unused_data:
        raise BadInput("body", f"the body goes on after its {encoding} stream ends")
    return inflated


def _too_large(limit: int, *, inflated: bool = False) -> BodyTooLarge:
    what = "inflated" if inflated else "request"
    return BodyTooLarge("body", f"the {what} body is larger than {limit} bytes")
