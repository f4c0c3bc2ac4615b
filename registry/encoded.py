"""Encoded documents as sequences of shared pieces, and their gzip forms from pieces' segments.

A fetch document is never one big buffer made anew for each change: it is a list of `Block`s
(the applications' head, one block per application, the tail), most of them shared with the
previous version of the document and with other documents. Sending one writes its blocks in
turn, with the transport's flow control in between, so even a 90 MB document costs the loop no
copy. Each block keeps its gzip `Segment` once made, so a document's gzip form costs only the
segments of the blocks that changed, compressed off the event loop.
"""

from __future__ import annotations

import asyncio

from registry.codec.deflate import Segment, gzip_pieces

# Less than this much to compress is done at once on the loop: a thread costs more.
_INLINE_BYTES = 32 * 1024


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


class Document:
    """One answer: its blocks, the registry index it shows, and when it was put together."""

    __slots__ = ("_gzip", "blocks", "built_at", "index", "size")

    def __init__(self, blocks: list[Block], index: int) -> None:
        self.blocks = blocks
        self.size = sum(len(block) for block in blocks)
        self.index = index
        self.built_at = 0.0  # monotonic seconds; the response cache stamps it
        self._gzip: list[bytes] | asyncio.Future[list[bytes]] | None = None

    @classmethod
    def of(cls, data: bytes, index: int = 0) -> Document:
        return cls([Block(data)], index)

    @property
    def body(self) -> bytes:
        """The whole document as one buffer (for tests and small documents: a copy)."""
        return b"".join(block.data for block in self.blocks)

    def pieces(self) -> list[bytes | memoryview]:
        return [block.data for block in self.blocks]

    async def gzipped(self) -> list[bytes]:
        """The gzip form, as pieces. The segments it lacks are compressed in a thread, once
        however many clients ask at the same time."""
        if isinstance(self._gzip, list):
            return self._gzip
        if self._gzip is None:
            missing = sum(len(block) for block in self.blocks if block.segment is None)
            if missing <= _INLINE_BYTES:
                self._gzip = _assemble(self.blocks)
                return self._gzip
            # zlib lets go of the GIL while it compresses: the loop goes on meanwhile.
            task = asyncio.ensure_future(asyncio.to_thread(_assemble, self.blocks))
            self._gzip = task
            task.add_done_callback(self._keep)
        # Shielded: a waiting client that goes away must not cancel the others' compression.
        return await asyncio.shield(self._gzip)

    def _keep(self, task: asyncio.Future[list[bytes]]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._gzip = None  # the next reader tries again
        else:
            self._gzip = task.result()


def _segment(block: Block) -> Segment:
    segment = block.segment
    if segment is None:
        segment = block.segment = Segment(block.data)
    return segment


def _assemble(blocks: list[Block]) -> list[bytes]:
    return gzip_pieces(_segment(block) for block in blocks)
