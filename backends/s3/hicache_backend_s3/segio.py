"""Page memory as request bodies and response sinks, without whole-object copies.

* :class:`SegmentReader`: a seekable, read-only file over an object's segments, the
  ``put_object`` body of a page: botocore hashes it (SigV4 over plain HTTP), seeks back,
  and urllib3 sends it chunk by chunk; botocore also seeks it back before a retry (a bare
  ``memoryview`` body would fail every retry with ``UnseekableStreamError``). ``read``
  returns read-only ``memoryview`` slices of the page memory (at most to the end of the
  current segment, a legal short read), so neither the hash nor the socket copies the
  page; only ``read()`` of everything across several segments builds ``bytes``.
* :func:`read_body_into`: stream a response body straight into the segments: the one
  copy, socket to page memory. urllib3's own ``readinto`` reads a whole ``bytes`` first
  and copies it (two copies), so the body is read from the underlying
  ``http.client.HTTPResponse`` inside urllib3's error handling, which returns the
  connection to the pool once the body is complete; when those urllib3 internals are
  absent (another urllib3), it falls back to the body's ``readinto``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk import Segments
from hicache_sdk.kit.segments import memoryviews as segment_views
from hicache_sdk.kit.segments import total_bytes as total_size

__all__ = ["SegmentReader", "read_body_into", "segment_views", "total_size"]


def _fill(readinto: Callable[[memoryview], int | None], views: Sequence[memoryview]) -> bool:
    for mv in views:
        got, n = 0, len(mv)
        while got < n:
            k = readinto(mv[got:])
            if not k:
                return False
            got += k
    return True


def read_body_into(body: Any, views: Sequence[memoryview]) -> bool:
    """Fill every view from ``body`` (a botocore ``StreamingBody``) in order. ``False``
    when the body ends early; a body longer than the views is the caller's check
    (``ContentLength``). I/O errors propagate (``OSError`` / urllib3 / botocore errors)."""
    raw = getattr(body, "_raw_stream", None)  # urllib3 HTTPResponse
    fp = getattr(raw, "_fp", None)  # http.client.HTTPResponse
    catcher = getattr(raw, "_error_catcher", None)
    if fp is None or catcher is None or not hasattr(fp, "readinto"):
        return _fill(body.readinto, views)
    with catcher():  # closes the connection on error, releases it to the pool when done
        return _fill(fp.readinto, views)


class SegmentReader(io.RawIOBase):
    """A read-only, seekable file over ``(address, nbytes)`` segments (see module docs)."""

    def __init__(self, segs: Segments) -> None:
        super().__init__()
        self._views = segment_views(segs)
        self._size = sum(len(v) for v in self._views)
        self._pos = 0

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        return self._pos

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        want = min(len(out), self._size - self._pos)
        done, skip = 0, self._pos
        for v in self._views:
            if done >= want:
                break
            if skip >= len(v):
                skip -= len(v)
                continue
            k = min(len(v) - skip, want - done)
            out[done : done + k] = v[skip : skip + k]
            done += k
            skip = 0
        self._pos += done
        return done

    def read(self, size: int | None = -1) -> Any:
        """Up to ``size`` bytes (all that is left for ``None`` / negative) as a read-only
        ``memoryview`` of the page memory, ending at most at the current segment's end
        (callers loop until an empty result). Reading everything across several segments
        returns ``bytes`` (a copy)."""
        left = self._size - self._pos
        want = left if size is None or size < 0 or size > left else size
        skip = self._pos
        for v in self._views:
            if skip < len(v):
                if skip + want <= len(v) or (size is not None and size >= 0):
                    k = min(want, len(v) - skip)
                    self._pos += k
                    return v[skip : skip + k].toreadonly()
                break
            skip -= len(v)
        if want == 0:
            return b""
        buf = bytearray(want)
        n = self.readinto(buf)
        return bytes(buf) if n == want else bytes(buf[:n])
