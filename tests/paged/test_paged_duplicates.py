"""Duplicate names in one write batch: the adapter writes the first occurrence only and
every occurrence gets its result, so the first write wins even over a transport that
would keep a later copy."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np

from hicache_sdk.memory_backend import MemoryTransport
from hicache_sdk.paged.header import digest
from hicache_sdk.paged.objects import ObjectEngine, ObjectIO
from hicache_sdk.resilience.metrics import Metrics
from hicache_sdk.transport import Segments


class LastCopyWins(MemoryTransport):
    """Within one batch the last copy of a name wins."""

    def __init__(self) -> None:
        super().__init__(store=f"dups-{uuid.uuid4().hex}")
        self.batches: list[list[str]] = []

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self.batches.append(list(keys))
        return list(reversed(super().write(list(reversed(keys)), list(reversed(buffers)))))


def _obj(name: str, buf: np.ndarray, header: bool) -> ObjectIO:
    ident = digest("ident") if header else None
    page = digest(name) if header else None
    return ObjectIO(name, ((int(buf.ctypes.data), buf.nbytes),), buf.nbytes, ident, page)


def test_first_occurrence_is_written_and_shared() -> None:
    for header in (False, True):
        t = LastCopyWins()
        eng = ObjectEngine(t, Metrics(), checksum=False)
        bufs = [np.full(256, v, np.uint8) for v in (1, 2, 3, 4)]
        objs = [_obj("k", bufs[0], header), _obj("j", bufs[1], header), _obj("k", bufs[2], header)]
        objs.append(_obj("k", bufs[3], header))
        assert eng.write(objs) == [True, True, True, True]
        assert t.batches == [["k", "j"]], "duplicates reached the transport"
        out = np.zeros(256, np.uint8)
        assert eng.read([_obj("k", out, header)]) == [True]
        assert (out == 1).all(), f"copy {int(out[0])} won; the first write must win"


def test_a_failed_first_write_fails_every_occurrence() -> None:
    class Refuses(LastCopyWins):
        def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
            self.batches.append(list(keys))
            return [k != "k" for k in keys]

    t = Refuses()
    eng = ObjectEngine(t, Metrics(), checksum=False)
    b = np.ones(16, np.uint8)
    assert eng.write([_obj("k", b, False), _obj("j", b, False), _obj("k", b, False)]) == [False, True, False]
