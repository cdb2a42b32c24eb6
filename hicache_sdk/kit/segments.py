"""Segments: the ``(address, nbytes)`` lists every transport reads into and writes from.

One object is read into, or written from, the concatenation of its segments in order.
Addresses are valid for the duration of one transport call only.

Helpers:

* :func:`total_bytes`, :func:`coalesce` (merge adjacent pieces, drop empty ones);
* :func:`memoryviews`: writable ``memoryview`` objects over the pieces, for ``recv_into``,
  ``readinto``, ``sendmsg``, ``os.preadv`` / ``os.pwritev``, with no copy;
* :func:`gather` / :func:`scatter` / :func:`copy_runs`: bulk copies with the GIL released.
  With the optional C extension (:data:`NATIVE`) a call is one C call, and a call of 4 MiB or
  more writes its runs of 64 KiB or more with streaming stores (x86-64): a staged batch's
  copy then leaves the caches to the code that runs next, which is what keeps staging within
  one memcpy of the page (``docs/resilience.md``, Performance). Without it, one
  ``ctypes.memmove`` per run (the same bytes).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from ..transport import Segment, Segments

try:
    from .. import _copy as _native
except ImportError:  # pragma: no cover - built without a compiler
    _native = None  # type: ignore[assignment]

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


#: Whether the optional C extension (``hicache_sdk._copy``) was built.
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


def copy_runs(runs: Sequence[tuple[int, int, int]]) -> int:
    """Copy every ``(dst, src, nbytes)`` run, in order; returns the bytes copied. Every
    entry is checked before any byte moves: a negative size, or a null address with a
    non-zero size, is a ``ValueError`` and nothing is copied. Runs must not overlap one
    another (a run may overlap itself: memmove semantics)."""
    if _native is not None:
        return _native.copy_runs(runs)
    return _py_copy_runs(runs)


def _py_copy_runs(runs: Sequence[tuple[int, int, int]]) -> int:
    total = 0
    for dst, src, n in runs:
        if n < 0 or (n and (not dst or not src)):
            raise ValueError(f"bad copy run ({dst}, {src}, {n})")
        total += n
    move = ctypes.memmove
    for dst, src, n in runs:
        if n:
            move(dst, src, n)
    return total


def gather(segments: Segments, dst: int) -> int:
    """Copy the pieces back to back into contiguous memory at ``dst``; returns the bytes."""
    runs, off = [], dst
    for a, n in segments:
        runs.append((off, a, n))
        off += n
    return copy_runs(runs)


def scatter(src: int, segments: Segments) -> int:
    """Split contiguous memory at ``src`` into the pieces; returns the bytes."""
    runs, off = [], src
    for a, n in segments:
        runs.append((a, off, n))
        off += n
    return copy_runs(runs)
