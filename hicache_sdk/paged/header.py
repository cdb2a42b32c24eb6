"""The SDK page integrity record: the LAST :data:`TRAILER_SIZE` bytes of every object
written by the ``default`` key scheme (a trailer after the payload). It lets a reader
reject a foreign, stale or corrupt page instead of loading it.

An object is ``payload || trailer``. The record is a trailer, not a header, so the payload
starts at file offset 0: a page-aligned payload can be read with ``O_DIRECT`` straight into
4 KiB-aligned host memory (a header before it would shift every payload byte off the
block grid). The record is still checked for every read, so the guarantees are those of
a header: a truncated object has the wrong size (and the record would not be at its end);
a torn, foreign or older-format object (format 1 had the record in front, so its last
bytes are payload) fails the magic / version / identity / page / length checks.

Layout of the record (little-endian, 96 bytes; :data:`HEADER_SIZE` is the same number,
kept for the callers that name it so)::

    offset size field
    0      4    magic          b"HCPG"
    4      2    version        FORMAT_VERSION (1)
    6      2    header_len     HEADER_SIZE
    8      4    flags          bit 0: ``checksum`` holds a zlib.crc32 of the payload
    12     4    reserved       zero
    16     8    payload_len    bytes before the trailer (the object is payload_len + 96)
    24     32   identity       sha256 of the key scheme's ``identity(pool)`` (model, dtype,
                               layout, geometry, parallel identity)
    56     32   page           sha256 of the page hash (its UTF-8 bytes)
    88     4    checksum       crc32 of the payload, 0 when the flag is clear
    92     4    reserved       zero

Edge cases: a header with unknown flag bits, non-zero reserved bytes, another version or
another header length is rejected (a newer writer's page is a miss, never misread). The
checksum is verified whenever the flag says it is present, whatever the reader's own
``checksum`` setting; a page written without one is accepted by a checksumming reader.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..transport import Segment

__all__ = [
    "FLAG_CHECKSUM",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "PAGE_DIGEST_AT",
    "TRAILER_SIZE",
    "HeaderError",
    "PageHeader",
    "crc32_segments",
    "digest",
    "page_digests",
    "page_records",
    "plain_records",
]

MAGIC = b"HCPG"
FORMAT_VERSION = 2  # 2: trailer after the payload (1: header before it, never read back)
HEADER_SIZE = 96
TRAILER_SIZE = HEADER_SIZE
FLAG_CHECKSUM = 0x1
_KNOWN_FLAGS = FLAG_CHECKSUM

_STRUCT = struct.Struct("<4sHHIIQ32s32sII")
assert _STRUCT.size == HEADER_SIZE
#: Offset of the 32-byte page digest inside the record (vectorised checks compare it).
PAGE_DIGEST_AT = 56


class HeaderError(ValueError):
    """A stored header failed validation. ``reason`` is a short metrics token
    (``"magic"``, ``"version"``, ``"identity"``, ``"page"``, ``"length"``, ``"flags"``,
    ``"checksum"``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid page header ({reason})")
        self.reason = reason


def digest(data: bytes | str) -> bytes:
    """The 32-byte sha256 digest stored in the header for an identity or page hash."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).digest()


def page_digests(page_hashes: Sequence[str]) -> bytes:
    """:func:`digest` of every page hash, concatenated (32 bytes each, in order)."""
    sha = hashlib.sha256
    return b"".join([sha(h.encode()).digest() for h in page_hashes])


def crc32_segments(segments: Iterable[Segment]) -> int:
    """zlib.crc32 over the concatenation of ``(address, nbytes)`` segments, without
    copying them. Empty input gives 0."""
    crc = 0
    for address, nbytes in segments:
        if nbytes:
            crc = zlib.crc32((ctypes.c_char * nbytes).from_address(address), crc)
    return crc


def plain_records(
    identity: bytes, pages: bytes | Sequence[bytes], payloads: Sequence[int], n: int
) -> npt.NDArray[np.uint8]:
    """The checksum-free records of ``n`` pages (digests ``pages``: a list, or
    :func:`page_digests`' concatenation) of each column of
    payload length ``payloads[c]``: one :data:`TRAILER_SIZE`-byte row per object, column by
    column (object ``c * n + i`` is column ``c`` of page ``i``). Written as trailers, and
    compared row by row with what a read found (a row that differs goes through
    :meth:`PageHeader.decode`: another page, a checksum, corruption)."""
    out = np.empty((n * len(payloads), TRAILER_SIZE), dtype=np.uint8)
    joined = pages if isinstance(pages, bytes) else b"".join(pages)
    digests = np.frombuffer(joined, dtype=np.uint8).reshape(n, 32) if n else None
    for c, plen in enumerate(payloads):
        rows = out[c * n : (c + 1) * n]
        rows[:] = _template(identity, plen)
        if digests is not None:
            rows[:, PAGE_DIGEST_AT : PAGE_DIGEST_AT + 32] = digests
    return out


def page_records(
    identity: bytes, page_hashes: Sequence[str], payloads: Sequence[int]
) -> npt.NDArray[np.uint8]:
    """:func:`plain_records` of these pages, digests included (writable)."""
    return plain_records(identity, page_digests(page_hashes), payloads, len(page_hashes))


@functools.lru_cache(maxsize=256)
def _template_bytes(identity: bytes, payload_len: int) -> bytes:
    """The checksum-free record of a page of this identity and payload length, with a zero
    page digest."""
    return PageHeader(identity, bytes(32), payload_len).encode()


@functools.lru_cache(maxsize=256)
def _template(identity: bytes, payload_len: int) -> npt.NDArray[np.uint8]:
    """:func:`_template_bytes` as a read-only row (a batch's records are copies of it)."""
    row = np.frombuffer(_template_bytes(identity, payload_len), dtype=np.uint8)
    row.flags.writeable = False
    return row


@dataclass(frozen=True)
class PageHeader:
    """One decoded integrity record (stored as the object's trailer). ``identity`` and ``page`` are 32-byte digests (see
    :func:`digest`); ``checksum`` is ``None`` when the page carries none."""

    identity: bytes
    page: bytes
    payload_len: int
    checksum: int | None = None

    def encode(self) -> bytes:
        """The :data:`HEADER_SIZE` bytes of this header."""
        if len(self.identity) != 32 or len(self.page) != 32:
            raise ValueError("identity and page must be 32-byte digests")
        if self.payload_len < 0:
            raise ValueError(f"payload_len must be >= 0, got {self.payload_len}")
        flags = FLAG_CHECKSUM if self.checksum is not None else 0
        return _STRUCT.pack(
            MAGIC,
            FORMAT_VERSION,
            HEADER_SIZE,
            flags,
            0,
            self.payload_len,
            self.identity,
            self.page,
            (self.checksum or 0) & 0xFFFFFFFF,
            0,
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> PageHeader:
        """Parse and structurally validate a header; raises :class:`HeaderError`."""
        if len(data) < HEADER_SIZE:
            raise HeaderError("length")
        magic, version, header_len, flags, res0, payload_len, ident, page, crc, res1 = _STRUCT.unpack_from(
            data
        )
        if magic != MAGIC:
            raise HeaderError("magic")
        if version != FORMAT_VERSION or header_len != HEADER_SIZE:
            raise HeaderError("version")
        if flags & ~_KNOWN_FLAGS or res0 or res1:
            raise HeaderError("flags")
        return cls(ident, page, payload_len, crc if flags & FLAG_CHECKSUM else None)

    def check(self, *, identity: bytes, page: bytes, payload_len: int) -> None:
        """Raise :class:`HeaderError` unless this header belongs to the expected page of
        the expected deployment with the expected payload length."""
        if self.identity != identity:
            raise HeaderError("identity")
        if self.page != page:
            raise HeaderError("page")
        if self.payload_len != payload_len:
            raise HeaderError("length")
