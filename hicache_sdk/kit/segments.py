"""Segments: the ``(address, nbytes)`` lists every transport reads into and writes from.

One object is read into, or written from, the concatenation of its segments in order.
Addresses are valid for the duration of one transport call only.

Helpers:

* :func:`total_bytes`, :func:`coalesce` (merge adjacent pieces, drop empty ones);
* :func:`memoryviews`: writable ``memoryview`` objects over the pieces, for ``recv_into``,
  ``readinto``, ``sendmsg``, ``os.preadv`` / ``os.pwritev``, with no copy;
* :func:`gather` / :func:`scatter` / :func:`copy_runs`: bulk copies. With the compiled
  :mod:`hicache_sdk._native` module the whole list is one call that releases the GIL while it
  copies (adjacent runs merged into one ``memmove``); without it, a ``ctypes.memmove`` loop
  (``ctypes`` also releases the GIL per call). :data:`NATIVE` says which one is in use.
  Large native copies are split over threads (:func:`copy_threads`) and written with
  streaming stores (:func:`copy_stream`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .._ext import native as _native
from ..transport import Segment, Segments

__all__ = [
    "NATIVE",
    "Segment",
    "Segments",
    "coalesce",
    "copy_runs",
    "gather",
    "memoryviews",
    "scatter",
    "total_bytes",
]

#: Whether the compiled copy module is in use.
NATIVE = _native is not None


def total_bytes(segments: Segments) -> int:
    """The bytes an object of these segments holds."""
    return sum(n for _, n in segments)


def coalesce(segments: Segments) -> list[Segment]:
    """Merge adjacent pieces (``a + n == next a``); drop empty ones."""
    out: list[Segment] = []
    for address, nbytes in segments:
        if nbytes <= 0:
            continue
        if out and out[-1][0] + out[-1][1] == address:
            out[-1] = (out[-1][0], out[-1][1] + nbytes)
        else:
            out.append((address, nbytes))
    return out


def memoryviews(segments: Segments) -> list[memoryview]:
    """Writable byte views over the pieces (empty pieces skipped), sharing their memory.
    Valid only while the memory is (for the duration of the transport call)."""
    out = []
    for address, nbytes in segments:
        if nbytes > 0:
            out.append(memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B"))
    return out


def _py_copy_runs(runs: Sequence[tuple[int, int, int]]) -> int:
    total = 0
    move = ctypes.memmove
    for dst, src, n in runs:
        if n:
            if not dst or not src:
                raise ValueError(f"null address in run ({dst}, {src}, {n})")
            move(dst, src, n)
        total += n
    return total


def copy_runs(runs: Sequence[tuple[int, int, int]]) -> int:
    """Copy every ``(dst, src, nbytes)`` run; returns the bytes copied. Entries are checked
    before any byte moves (native) -- a bad one is a ``ValueError``."""
    if _native is not None:
        return _native.copy_runs(runs)
    return _py_copy_runs(runs)


def copy_threads(n: int = -1) -> int:
    """The number of threads a large native copy is split over (at least 4 MiB in total,
    one thread per 2 MiB, the caller's included); ``0`` is the default (the online CPUs, at
    most 4), ``1`` never splits. Returns the setting before the call; ``-1`` only reads it.
    The environment variable ``HICACHE_COPY_THREADS`` sets it at import. Without the native
    module copies are single-threaded and this returns 1."""
    if _native is None:
        return 1
    return _native.copy_threads(n)


def copy_stream(flag: int = -1) -> int:
    """Whether a native copy of 4 MiB or more writes with non-temporal (streaming) stores,
    bypassing the cache (x86-64; elsewhere the flag has no effect): ``1`` on (the default),
    ``0`` off. Returns the setting before the call; ``-1`` only reads it. The environment
    variable ``HICACHE_COPY_STREAM=0`` turns it off at import. Without the native module
    this returns 0."""
    if _native is None:
        return 0
    return _native.copy_stream(flag)


def gather(segments: Segments, dst: int) -> int:
    """Copy the pieces back to back into contiguous memory at ``dst``; returns the bytes."""
    if _native is not None:
        return _native.gather(dst, segments)
    runs, off = [], dst
    for a, n in segments:
        runs.append((off, a, n))
        off += n
    return _py_copy_runs(runs)


def scatter(src: int, segments: Segments) -> int:
    """Split contiguous memory at ``src`` into the pieces; returns the bytes."""
    if _native is not None:
        return _native.scatter(src, segments)
    runs, off = [], src
    for a, n in segments:
        runs.append((a, off, n))
        off += n
    return _py_copy_runs(runs)
