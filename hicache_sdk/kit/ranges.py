"""The whole-read fallback of :meth:`~hicache_sdk.transport.Transport.read_ranges`.

A transport without native ranged reads serves them with one ``exists`` (for the size)
and one whole ``read`` into scratch memory, then copies each range out. Same answers as a
native implementation: a missing object, an unknown size, a range past the end or a
failed read is ``False``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from ..transport import SIZE_UNKNOWN, Range, Transport, check_ranges
from .segments import scatter

__all__ = ["read_ranges_whole", "ranges_within"]


def ranges_within(ranges: Sequence[tuple[int, int, object]], size: int) -> bool:
    """Whether every ``(offset, nbytes, _)`` lies within an object of ``size`` bytes."""
    return all(offset + n <= size for offset, n, _ in ranges)


def read_ranges_whole(transport: Transport, key: str, ranges: Sequence[Range]) -> bool:
    """``transport.read_ranges(key, ranges)`` by one whole read (see the module docs)."""
    checked = check_ranges(ranges)
    size = transport.exists([key])[0]
    if size is None or size == SIZE_UNKNOWN or not ranges_within(checked, size):
        return False
    if not checked or all(n == 0 for _, n, _ in checked):
        return True
    scratch = (ctypes.c_char * size)()
    base = ctypes.addressof(scratch)
    if not transport.read([key], [[(base, size)]])[0]:
        return False
    for offset, n, segs in checked:
        if n:
            scatter(base + offset, [s for s in segs if s[1]])
    return True
