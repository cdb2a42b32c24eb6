"""Vectored file I/O straight into / out of caller memory given as ``(address, nbytes)``.

No intermediate bytes object is made: each segment becomes a ``memoryview`` over the
caller's memory (a ctypes array at that address) and ``os.preadv``/``os.pwritev`` move
the bytes. Short transfers (signals, the 2 GiB per-call kernel cap, more than
``IOV_MAX`` segments) are resumed until complete.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from typing import Any

from hicache_sdk.kit.segments import memoryviews as segment_views
from hicache_sdk.kit.segments import total_bytes
from hicache_sdk.transport import Segments

__all__ = [
    "DIO_ALIGN",
    "IOV_MAX",
    "advance",
    "aligned_prefix",
    "check_segments",
    "segment_arrays",
    "segment_views",
    "preadv_exact",
    "preadv_nowait",
    "pwritev_all",
    "total_bytes",
]

IOV_MAX: int = max(16, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024)
#: Alignment O_DIRECT needs of memory addresses, lengths and file offsets. 4096 is a
#: multiple of every common logical block size (512, 4096) and is the page size.
DIO_ALIGN = 4096
_RWF_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)


def check_segments(buffers: Sequence[Segments], arg: str = "buffers") -> None:
    """Raise ``ValueError`` naming ``arg[i]`` for a segment that is not ``(address > 0,
    nbytes >= 0)`` of ints. Called before any I/O."""
    for i, segs in enumerate(buffers):
        for addr, n in segs:
            if type(addr) is not int or type(n) is not int or addr <= 0 or n < 0:
                raise ValueError(f"{arg}[{i}]: invalid segment ({addr!r}, {n!r})")


_ARRAY_TYPES: dict[int, type[ctypes.Array[ctypes.c_char]]] = {}


def segment_arrays(segments: Segments, tail: Any = None) -> tuple[list[Any], int]:
    """``(buffers, total)``: a ctypes byte array over each non-empty segment (the cheapest
    writable buffer ``os.preadv`` accepts; array types are cached per length), then
    ``tail`` when given (a buffer of the caller's, not counted in ``total``), and the
    segments' byte total. The arrays alias the caller's memory: they must not outlive
    the call."""
    out: list[Any] = []
    total = 0
    types = _ARRAY_TYPES
    for addr, n in segments:
        if n:
            t = types.get(n)
            if t is None:
                if len(types) > 4096:  # many odd lengths: keep the cache bounded
                    types.clear()
                t = types[n] = ctypes.c_char * n
            out.append(t.from_address(addr))
            total += n
    if tail is not None:
        out.append(tail)
    return out, total


def advance(views: list[memoryview], done: int) -> list[memoryview]:
    """Drop the first ``done`` bytes from the view list."""
    i = 0
    while i < len(views) and done >= views[i].nbytes:
        done -= views[i].nbytes
        i += 1
    rest = views[i:]
    if rest and done:
        rest[0] = rest[0][done:]
    return rest


def preadv_exact(fd: int, views: list[memoryview], offset: int = 0) -> bool:
    """Fill every view from ``fd`` at ``offset``. ``False`` on a short file (EOF before the
    views are full). ``OSError`` propagates."""
    while views:
        n = os.preadv(fd, views[:IOV_MAX], offset)
        if n <= 0:
            return False
        offset += n
        views = advance(views, n)
    return True


def pwritev_all(fd: int, views: list[memoryview], offset: int = 0) -> None:
    """Write every view to ``fd`` at ``offset``; ``OSError`` (ENOSPC, EIO...) propagates."""
    while views:
        n = os.pwritev(fd, views[:IOV_MAX], offset)
        if n <= 0:  # pragma: no cover - a regular file never accepts 0 bytes without error
            raise OSError(0, "pwritev wrote nothing")
        offset += n
        views = advance(views, n)


def aligned_prefix(segments: Segments, align: int = DIO_ALIGN) -> tuple[int, int]:
    """``(count, nbytes)`` of the leading non-empty segments whose address and length are
    multiples of ``align``: the part of an object starting at file offset 0 that
    ``O_DIRECT`` can read straight into the caller's memory (every such segment starts
    at an aligned file offset because every length before it is aligned). Empty
    segments are skipped (they never reach :func:`segment_views`)."""
    count = nbytes = 0
    for addr, n in segments:
        if not n:
            continue
        if addr % align or n % align:
            break
        count += 1
        nbytes += n
    return count, nbytes


def preadv_nowait(fd: int, views: list[memoryview]) -> int:
    """Read from offset 0 only what the page cache holds (``RWF_NOWAIT``): the bytes read,
    0 when nothing is cached, ``-1`` when the kernel or file system does not support it.
    Never waits for the device."""
    if not _RWF_NOWAIT:
        return -1
    try:
        return os.preadv(fd, views[:IOV_MAX], 0, _RWF_NOWAIT)
    except BlockingIOError:
        return 0
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return -1
        raise
