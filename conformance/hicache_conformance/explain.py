"""Failure messages that name what happened: the keys, expected vs got, the first
differing byte, and what the difference looks like (a short read, another page's bytes, a
backend that stores nothing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["SENTINEL", "first_difference", "describe_page", "describe_pages", "short_key", "is_initial_fill"]

#: The byte the suite fills a destination page with before a read (``pools.zero_page``).
SENTINEL = 0x5A


def short_key(key: str) -> str:
    """``abcdef0123…`` (12 characters) for a long page hash."""
    return key if len(key) <= 14 else f"{key[:12]}…"


def first_difference(want: bytes, got: bytes) -> int | None:
    """Offset of the first byte where ``want`` and ``got`` differ (the shorter one's
    length when one is a prefix of the other), or ``None`` when equal."""
    if want == got:
        return None
    n = min(len(want), len(got))
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes: pages are up to megabytes
        mid = (lo + hi) // 2
        if want[lo : mid + 1] == got[lo : mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _fill(data: bytes) -> int | None:
    """The byte ``data`` consists of entirely, if any."""
    if data and data.count(data[:1]) == len(data):
        return data[0]
    return None


def is_initial_fill(data: bytes) -> bool:
    """Whether ``data`` is only a destination's initial fill (all 0x00 or all the sentinel):
    nothing was copied into it."""
    return _fill(data) in (0, SENTINEL)


def describe_page(
    label: str, want: bytes | None, got: bytes | None, others: Mapping[str, bytes] | None = None
) -> str:
    """One line on how ``got`` differs from ``want`` (``""`` when equal). ``None`` is a
    miss. ``others``: other pages' bytes by label, to recognise a page read into the wrong
    place."""
    if want == got:
        return ""
    if got is None:
        return f"{label}: expected {len(want or b'')} bytes, got a miss"
    if want is None:
        return f"{label}: expected a miss, got {len(got)} bytes"
    for name, data in (others or {}).items():
        if got == data:
            return f"{label}: got the bytes of {name} instead of its own"
    if len(got) != len(want):
        return f"{label}: expected {len(want)} bytes, got {len(got)}"
    i = first_difference(want, got)
    assert i is not None
    line = f"{label}: first differing byte at offset {i} of {len(want)} (expected 0x{want[i]:02x}, got 0x{got[i]:02x})"
    tail = _fill(got[i:])
    if i == 0 and tail == SENTINEL:
        line += (
            f"; the whole page is still the destination's initial fill (0x{tail:02x}): no byte was copied in"
        )
    elif i == 0 and tail == 0:
        line += (
            "; the whole page is 0x00: none of the page's bytes (an untouched destination, or zeros stored)"
        )
    elif tail == SENTINEL:
        line += (
            f"; bytes {i}..{len(want) - 1} still hold the destination's initial fill (0x{tail:02x}): "
            f"a short read, only the first {i} of {len(want)} bytes arrived"
        )
    elif tail == 0:
        line += (
            f"; bytes {i}..{len(want) - 1} are 0x00: a short read or a truncated page, only the first {i} of "
            f"{len(want)} bytes are the page's"
        )
    elif _fill(got) is not None:
        line += f"; the whole page is 0x{got[0]:02x}"
    return line


def describe_pages(
    keys: Sequence[str], want: Sequence[bytes | None], got: Sequence[bytes | None], *, limit: int = 3
) -> str:
    """The differing pages of a batch, one line each (at most ``limit``), by index and key."""
    labels = [f"page {i} ({short_key(k)})" for i, k in enumerate(keys)]
    others = {lab: w for lab, w in zip(labels, want) if w is not None}
    lines = []
    for lab, w, g in zip(labels, want, got):
        line = describe_page(lab, w, g, {k: v for k, v in others.items() if k != lab})
        if line:
            lines.append(line)
    if len(got) != len(want):
        lines.append(f"expected {len(want)} results, got {len(got)}")
    more = len(lines) - limit
    return "\n".join(lines[:limit] + ([f"... and {more} more"] if more > 0 else []))
