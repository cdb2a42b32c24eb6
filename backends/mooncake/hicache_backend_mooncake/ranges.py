"""Native ranged reads for :class:`~.mooncake_transport.MooncakeTransport`: the object's
size (``get_size``), then, inside a get session (``batch_get_session_start`` / ``_end``: the
ranged call refuses to run outside one), one ``batch_get_into_multi_buffer_ranges`` call
that moves every range straight into its segments (zero-copy, whatever the number of
ranges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_sdk.transport import Range, check_ranges, ranges_within

__all__ = ["flatten_ranges", "read_ranges_batch_with", "read_ranges_with"]


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


def read_ranges_batch_with(
    store: Any, keys: Sequence[str], ranges: Sequence[Sequence[Range]]
) -> tuple[list[bool], list[str]]:
    """``(answers, reasons)`` of reading ``ranges[i]`` of ``keys[i]`` for every ``i`` with
    a set-up Mooncake client: a size query per object, then one get session and one
    ``batch_get_into_multi_buffer_ranges`` call for every object that has bytes to move.
    ``reasons``: a failure token per failed object that was not a plain miss. Duplicate
    keys are read one at a time (:func:`read_ranges_with`): Mooncake fills one destination
    per key in a batch."""
    flat = [flatten_ranges(r) for r in ranges]
    n = len(keys)
    out = [False] * n
    reasons: list[str] = []
    if len(set(keys)) != n:
        for i, (k, r) in enumerate(zip(keys, ranges)):
            out[i], reason = read_ranges_with(store, k, r)
            if reason is not None:
                reasons.append(reason)
        return out, reasons
    todo: list[int] = []
    for i, (key, (pieces, checked)) in enumerate(zip(keys, flat)):
        size = int(store.get_size(key))
        if size < 0:
            continue
        if not ranges_within(checked, size):
            reasons.append("out_of_range")
        elif not pieces:
            out[i] = True
        else:
            todo.append(i)
    if not todo:
        return out, reasons
    names = [keys[i] for i in todo]
    started = list(store.batch_get_session_start(names))
    if len(started) != len(names):
        started = [-1] * len(names)
    live = [i for i, code in zip(todo, started) if code == 0]  # the others: gone since get_size
    try:
        if live:
            codes = store.batch_get_into_multi_buffer_ranges(
                [keys[i] for i in live],
                [[p[0] for p in flat[i][0]] for i in live],
                [[p[1] for p in flat[i][0]] for i in live],
                [[p[2] for p in flat[i][0]] for i in live],
            )
            codes = list(codes) if isinstance(codes, (list, tuple)) else []
            for j, i in enumerate(live):
                want = sum(p[1] for p in flat[i][0])
                if j < len(codes) and codes[j] == want:
                    out[i] = True
                else:
                    reasons.append("transfer")
    finally:
        store.batch_get_session_end([keys[i] for i, code in zip(todo, started) if code == 0])
    return out, reasons
