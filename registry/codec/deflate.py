"""Gzip documents assembled from pieces compressed once each.

A document of 100 000 instances is about 90 MB; compressing it whole takes most of a second,
and during a deploy it changes ten times a second. So each piece of a document (one
application's block, say) is compressed on its own, once, into a `Segment`: raw deflate ended
by a sync flush, which leaves it byte-aligned and complete, so segments can follow each other
in one deflate stream. A document's gzip form is then the gzip header, its pieces' segments,
the final empty block, and the CRC-32 of the whole, combined from the pieces' own CRCs without
reading them again (zlib's crc32_combine, by multiplication modulo the CRC polynomial). The
result is one ordinary gzip member, which every gzip reader takes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

__all__ = ["FINAL", "HEADER", "Segment", "crc32_combine", "deflate", "gzip_pieces"]

LEVEL = 6
# A gzip header: deflate, no flags, no modification time, no extra flags, OS unknown.
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
FINAL = b"\x03\x00"  # an empty final block with fixed codes: ends the deflate stream

_POLY = 0xEDB88320  # CRC-32's polynomial, bit-reflected as zlib writes it
_X0 = 1 << 31  # the polynomial 1 (x^0), reflected


class Segment:
    """Raw deflate of one piece, with what combining its CRC into a document's needs."""

    __slots__ = ("crc", "deflated", "length", "shift")

    def __init__(self, data: bytes | memoryview) -> None:
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        self.deflated = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
        self.crc = zlib.crc32(data)
        self.length = len(data)
        # x^(8 * length) modulo the polynomial: what a CRC is multiplied by when this piece
        # follows it. Computed here, once, so combining costs one multiplication per piece.
        self.shift = _x2n(self.length, 3)


def deflate(data: bytes | memoryview) -> Segment:
    return Segment(data)


def gzip_pieces(segments: Iterable[Segment]) -> list[bytes]:
    """The gzip form of the concatenation of what `segments` hold, as pieces to send in order."""
    pieces = [HEADER]
    crc = length = 0
    for segment in segments:
        pieces.append(segment.deflated)
        crc = _multiply(segment.shift, crc) ^ segment.crc
        length += segment.length
    pieces.append(FINAL)
    pieces.append(struct.pack("<II", crc, length & 0xFFFFFFFF))
    return pieces


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from the CRC of A, the CRC of B and the length of B."""
    return _multiply(_x2n(length2, 3), crc1) ^ crc2


def _multiply(a: int, b: int) -> int:
    """a x b modulo the CRC polynomial, both bit-reflected (zlib's multmodp)."""
    m = _X0
    product = 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> tuple[int, ...]:
    """x^(2^k) modulo the polynomial, for k in 0..31."""
    power = 1 << 30  # x^1, reflected
    table = [power]
    for _ in range(31):
        power = _multiply(power, power)
        table.append(power)
    return tuple(table)


_X2N = _powers()


def _x2n(n: int, k: int) -> int:
    """x^(n * 2^k) modulo the polynomial (zlib's x2nmodp)."""
    power = _X0
    while n:
        if n & 1:
            power = _multiply(_X2N[k & 31], power)
        n >>= 1
        k += 1
    return power
