"""Ranged reads (``Transport.read_ranges``), part of :class:`~.transport_tests.TransportTests`.

Every transport answers them: natively when it overrides the verb, else through the base
class's whole read (both must agree). Rules: the bytes of each range land in its own
segments, byte for byte; ranges at the object's edges and empty ranges are fine; a range
past the end is a miss (``False``), never a short read or an exception; a missing object
is ``False``; a negative offset is a ``ValueError`` before any I/O. A transport that reads
many objects' ranges in one call (it offers :class:`~hicache_sdk.transport.RangedReads`)
answers each object as ``read_ranges`` would.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hicache_sdk.transport import RangedReads, has_read_ranges

from .. import pools as P
from ..capabilities import level

__all__ = ["RangeReadTests"]

_N = 4096


def _sentinel(n: int) -> torch.Tensor:
    return torch.full((n,), 0x5A, dtype=torch.uint8)


def _two(t: torch.Tensor) -> list[tuple[int, int]]:
    """``t`` as two segments (the first one byte long when ``t`` is short)."""
    n = t.numel()
    cut = max(1, n // 3) if n else 0
    return [(t.data_ptr(), cut), (t.data_ptr() + cut, n - cut)]


class RangeReadTests:
    """Mixin of :class:`TransportTests` (uses its ``transport`` and ``tkeys`` fixtures)."""

    def _stored(self, transport: Any, key: str) -> bytes:
        """Write a pattern object and read it back whole first (so a transport whose reads
        come back short is reported as reading short, as in every transport test)."""
        data = P.pattern(key, _N)
        src = torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
        assert transport.write([key], [[(src.data_ptr(), _N)]]) == [True], "the write reported False"
        self._read_back(transport, key, data, "a just-written object")  # type: ignore[attr-defined]
        return data

    @level(1)
    def test_transport_read_ranges_edges_and_empty(self, transport: Any, tkeys: Any) -> None:
        (k,) = tkeys("ranges")
        data = self._stored(transport, k)
        spans = [(0, 100), (_N - 100, 100), (1000, 3000), (50, 60), (0, _N), (_N, 0), (0, 0), (7, 0)]
        dsts = [_sentinel(n) for _, n in spans]
        ranges = [(off, _two(d) if n else []) for (off, n), d in zip(spans, dsts)]
        native = "native" if has_read_ranges(transport) else "whole-read fallback"
        assert transport.read_ranges(k, ranges) is True, f"read_ranges ({native}) missed a stored object"
        for (off, n), d in zip(spans, dsts):
            got = bytes(d.numpy())
            assert got == data[off : off + n], f"range ({off}, {n}) read wrong bytes ({native})"
        assert transport.read_ranges(k, []) is True, "an empty list of ranges on a stored object"

    @level(1)
    def test_transport_read_ranges_out_of_bounds_is_a_miss(self, transport: Any, tkeys: Any) -> None:
        (k, absent) = tkeys("ranges-oob", 2)
        self._stored(transport, k)
        for off, n in ((_N - 10, 20), (_N + 1, 0), (_N, 1), (1 << 40, 8)):
            d = _sentinel(n)
            try:
                ok = transport.read_ranges(k, [(0, []), (off, [(d.data_ptr(), n)] if n else [])])
            except Exception as e:
                pytest.fail(f"a range past the end raised {type(e).__name__}: {e} (it must be a miss)")
            assert ok is False, f"range ({off}, {n}) of a {_N}-byte object read as True (a short read)"
        d = _sentinel(16)
        assert transport.read_ranges(absent, [(0, [(d.data_ptr(), 16)])]) is False
        assert transport.read_ranges(absent, []) is False, "an empty list of ranges on a missing object"
        with pytest.raises(ValueError, match="offset"):
            transport.read_ranges(k, [(-1, [(d.data_ptr(), 16)])])

    @level(1)
    def test_transport_read_ranges_batch_answers_per_object(self, transport: Any, tkeys: Any) -> None:
        batch = transport.offers(RangedReads)
        if batch is None:
            pytest.skip(f"{type(transport).__name__} does not offer RangedReads (ranges of many objects)")
        keys = tkeys("ranges-batch", 10)
        absent, oob = 3, 6
        data = {i: self._stored(transport, k) for i, k in enumerate(keys) if i != absent}
        spans = [[(0, 64 + i), (_N - 100 + i, 100 - i)] for i in range(len(keys))]
        spans[oob] = [(0, 10), (_N - 5, 10)]
        dsts = [[_sentinel(n) for _, n in sp] for sp in spans]
        ranges = [[(off, [(d.data_ptr(), n)]) for (off, n), d in zip(sp, ds)] for sp, ds in zip(spans, dsts)]
        got = batch.read_ranges_batch(keys, ranges)
        want = [i not in (absent, oob) for i in range(len(keys))]
        assert [bool(g) for g in got] == want, f"read_ranges_batch answered {got}, expected {want}"
        for i, (sp, ds) in enumerate(zip(spans, dsts)):
            if want[i]:
                for (off, n), d in zip(sp, ds):
                    assert bytes(d.numpy()) == data[i][off : off + n], f"object {i}: range ({off}, {n})"
        assert batch.read_ranges_batch([], []) == []
        with pytest.raises(ValueError):
            batch.read_ranges_batch(keys[:1], [[(-1, [])]])
