"""Native ranged reads for :class:`~.mooncake_transport.MooncakeTransport`: the object's
size (``get_size``), then, inside a get session (``batch_get_session_start`` / ``_end``: the
ranged call refuses to run outside one), one ``batch_get_into_multi_buffer_ranges`` call
that moves every range straight into its segments (zero-copy, whatever the number of
ranges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_sdk.transport import Range, check_ranges, ranges_within

__all__ = ["flatten_ranges", "read_ranges_with"]


def flatten_ranges(ranges: Sequence[Range]) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, Any]]]:
    """``(pieces, checked)``: every non-empty segment as ``(address, nbytes, object
    offset)``, and :func:`~hicache_sdk.transport.check_ranges`'s answer."""
    checked = check_ranges(ranges)
    pieces: list[tuple[int, int, int]] = []
    for offset, _, segs in checked:
        pos = offset
        for addr, n in segs:
            if n:
                pieces.append((addr, n, pos))
                pos += n
    return pieces, checked


def read_ranges_with(store: Any, key: str, ranges: Sequence[Range]) -> tuple[bool, str | None]:
    """``(ok, reason)`` of reading ``ranges`` of ``key`` with a set-up Mooncake client:
    ``reason`` is the failure token when ``ok`` is ``False`` (``None``: a plain miss)."""
    pieces, checked = flatten_ranges(ranges)
    size = int(store.get_size(key))
    if size < 0:
        return False, None
    if not ranges_within(checked, size):
        return False, "out_of_range"
    if not pieces:
        return True, None
    started = store.batch_get_session_start([key])
    if list(started) != [0]:  # gone since get_size, or the session was refused
        return False, None
    try:
        codes = store.batch_get_into_multi_buffer_ranges(
            [key], [[p[0] for p in pieces]], [[p[1] for p in pieces]], [[p[2] for p in pieces]]
        )
    finally:
        store.batch_get_session_end([key])
    want = sum(p[1] for p in pieces)
    if isinstance(codes, (list, tuple)) and len(codes) == 1 and codes[0] == want:
        return True, None
    return False, "transfer"
