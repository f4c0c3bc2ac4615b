"""Encoded documents as sequences of shared pieces, and their gzip forms from pieces' segments.

A fetch document is never one big buffer made anew for each change: it is a list of `Block`s
(the applications' head, one block per application, the tail), most of them shared with the
previous version of the document and with other documents. Sending one hands its pieces to
the transport as they are (see `negotiation.Pieces`), so even a 90 MB document costs the loop
no copy. Each block keeps its gzip `Segment` once made, so a document's gzip form costs only the
segments of the blocks that changed, compressed off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from registry.codec import Format, shape
from registry.common.tasks import Pacer
from registry.reads.deflate import GzipPieces, Segment

# Less than this much to compress is done at once on the loop: a thread costs more.
_INLINE_BYTES = 32 * 1024
# A document this size or smaller is joined into one buffer, once for all its readers; larger,
# it is sent in its pieces. Where a transport needs few large writes, they are joined this big.
WRITE_BYTES = 1024 * 1024


class Block:
    """Bytes that are part of one or more documents, with their gzip segment once made."""

    __slots__ = ("_rest", "data", "segment")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.segment: Segment | None = None
        self._rest: Block | None = None

    def rest(self) -> Block:
        """The block without its first byte (a separator that the first item does without)."""
        if self._rest is None:
            self._rest = Block(memoryview(self.data)[1:])
        return self._rest

    def __len__(self) -> int:
        return len(self.data)


def application_block(fmt: Format, name: str, items: Iterable[bytes]) -> Block:
    """One application of a document's list, from its encoded instance items; in JSON it
    starts with the separator that goes before every application but the first (`Block.rest`
    is without it)."""
    codec = shape(fmt)
    return Block(codec.SEPARATOR + codec.application_block(name, items))


class Document:
    """One answer: its blocks, the registry index it shows, and when it was put together."""

    __slots__ = ("_gzip", "_plain", "blocks", "built_at", "index", "size")

    def __init__(self, blocks: list[Block], index: int) -> None:
        self.blocks = blocks
        self.size = sum(len(block) for block in blocks)
        self.index = index
        self.built_at = 0.0  # monotonic seconds; the response cache stamps it
        self._gzip: list[bytes] | asyncio.Future[list[bytes]] | None = None
        self._plain: list[bytes | memoryview] | None = None

    @classmethod
    def of(cls, data: bytes, index: int = 0) -> Document:
        return cls([Block(data)], index)

    @property
    def body(self) -> bytes:
        """The whole document as one buffer (for tests and small documents: a copy)."""
        return b"".join(block.data for block in self.blocks)

    def pieces(self) -> list[bytes | memoryview]:
        """What to write: the blocks as they are, or one buffer for a document of a megabyte
        or less (joining a few small blocks once costs less than a write each, per client)."""
        if self._plain is None:
            datas = [block.data for block in self.blocks]
            self._plain = [b"".join(datas)] if self.size <= WRITE_BYTES else datas
        return self._plain

    @property
    def gzip(self) -> list[bytes] | None:
        """The gzip form's pieces once made (`gzipped` makes them)."""
        return self._gzip if isinstance(self._gzip, list) else None

    async def gzipped(self) -> list[bytes]:
        """The gzip form, as pieces (one when small). The segments it lacks are compressed in
        a thread, once however many clients ask at the same time; their CRCs are combined on
        the loop."""
        if isinstance(self._gzip, list):
            return self._gzip
        if self._gzip is None:
            self._gzip = asyncio.ensure_future(self._assemble())
        # Shielded: a waiting client that goes away must not cancel the others' compression.
        gzipped = await asyncio.shield(self._gzip)
        self._gzip = gzipped
        return gzipped

    async def _assemble(self) -> list[bytes]:
        try:
            await compress(self.blocks)
            gzip, pacer = GzipPieces(), Pacer()
            for block in self.blocks:
                gzip.add(_segment(block))
                await pacer.pace()
            pieces = gzip.finish()
            # Not joined when large: a delta in a deploy is a new 6 MB document twenty times a
            # second, each read about once, and joining each held the GIL for milliseconds.
            return [b"".join(pieces)] if sum(map(len, pieces)) <= WRITE_BYTES else pieces
        except BaseException:
            self._gzip = None  # the next reader tries again
            raise


def coalesced(pieces: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """Small pieces joined into writes of at least `WRITE_BYTES` (but the last), for a
    transport that makes a system call of each write: a gzip document is hundreds of
    segments of a few KB."""
    out: list[bytes | memoryview] = []
    group: list[bytes | memoryview] = []
    size = 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= WRITE_BYTES:
            out.append(b"".join(group))
            group, size = [], 0
    if group:
        out.append(b"".join(group))
    return out


async def compress(blocks: Iterable[Block]) -> None:
    """Make the segments `blocks` lack: on the loop if they are few bytes, else in a thread
    (zlib lets go of the GIL while it compresses: the loop goes on meanwhile)."""
    missing = [block for block in blocks if block.segment is None]
    if sum(len(block) for block in missing) <= _INLINE_BYTES:
        _compress(missing)
    else:
        await asyncio.to_thread(_compress, missing)


def _compress(blocks: list[Block]) -> None:
    for block in blocks:
        _segment(block)


def _segment(block: Block) -> Segment:
    segment = block.segment
    if segment is None:
        segment = block.segment = Segment(block.data)
    return segment
