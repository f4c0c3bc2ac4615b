"""Documents in blocks, and gzip forms assembled from the blocks' own segments."""

from __future__ import annotations

import asyncio
import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st

from registry.reads import encoded
from registry.reads.deflate import GzipPieces, Segment
from registry.reads.encoded import Block, Document

PARTS = st.lists(st.binary(max_size=3000) | st.sampled_from([b"", b",", b'{"a":1}' * 200]))


def gzipped(parts: list[bytes]) -> bytes:
    pieces = GzipPieces()
    for part in parts:
        pieces.add(Segment(part))
    return b"".join(pieces.finish())


class TestDeflate:
    @given(first=st.binary(max_size=5000), second=st.binary(max_size=5000))
    def test_the_combined_crc_is_the_crc_of_both(self, first, second):
        """The trailer's CRC-32, combined from the pieces' own, is that of the whole."""
        trailer = gzipped([first, second])[-8:-4]
        assert zlib.crc32(first + second) == int.from_bytes(trailer, "little")

    @given(parts=PARTS)
    def test_segments_make_one_gzip_member_of_the_whole(self, parts):
        """Compressed apart, joined: any gzip reader inflates the concatenation."""
        body = gzipped(parts)
        assert b"".join(parts) == gzip.decompress(body)
        assert b"".join(parts) == zlib.decompressobj(wbits=31).decompress(body)


class TestDocument:
    @given(parts=PARTS)
    async def test_gzip_form_inflates_to_the_plain_form(self, parts):
        document = Document([Block(part) for part in parts], index=1)
        assert b"".join(parts) == document.body
        assert document.body == gzip.decompress(b"".join(await document.gzipped()))

    async def test_a_block_is_compressed_once_for_every_document_that_holds_it(self, monkeypatch):
        """A document made again after a change compresses only its new blocks."""
        made = []

        class Counted(Segment):
            def __init__(self, data):
                made.append(bytes(data))
                super().__init__(data)

        monkeypatch.setattr(encoded, "Segment", Counted)
        shared = Block(b"shared" * 10_000)
        await Document([Block(b"v1"), shared], index=1).gzipped()
        await Document([Block(b"v2"), shared], index=2).gzipped()
        assert [b"v1", b"shared" * 10_000, b"v2"] == made

    async def test_concurrent_readers_compress_once(self, monkeypatch):
        """Many clients asking at once share one compression."""
        calls = []
        real = encoded._compress
        monkeypatch.setattr(encoded, "_compress", lambda blocks: calls.append(1) or real(blocks))
        document = Document([Block(b"payload" * 100_000)], index=1)
        results = await asyncio.gather(*(document.gzipped() for _ in range(5)))
        assert {b"payload" * 100_000} == {gzip.decompress(b"".join(r)) for r in results}
        await document.gzipped()
        assert 1 == len(calls)

    async def test_a_cancelled_reader_does_not_cancel_the_others(self):
        """One client going away leaves the shared compression to the rest."""
        document = Document([Block(b"payload" * 100_000)], index=1)
        leaving = asyncio.ensure_future(document.gzipped())
        staying = asyncio.ensure_future(document.gzipped())
        await asyncio.sleep(0)
        leaving.cancel()
        assert document.body == gzip.decompress(b"".join(await staying))
        assert document.body == gzip.decompress(b"".join(await document.gzipped()))

    def test_rest_is_the_block_without_its_separator(self):
        block = Block(b",{}")
        assert b"{}" == bytes(block.rest().data)
        assert block.rest() is block.rest()


class TestCoalesced:
    @given(st.lists(st.binary(max_size=100_000), max_size=40))
    def test_pieces_are_joined_in_order_into_few_writes(self, pieces):
        joined = encoded.coalesced(pieces)
        assert b"".join(pieces) == b"".join(joined)
        assert all(len(write) >= encoded.WRITE_BYTES for write in joined[:-1])
