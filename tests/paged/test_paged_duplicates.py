"""Duplicate names in one write batch: the adapter writes the first occurrence only and
every occurrence gets its result, so the first write wins even over a transport that
would keep a later copy."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np

from hicache_sdk.memory import MemoryTransport
from hicache_sdk.metrics.backend import Metrics
from hicache_sdk.paged.header import digest
from hicache_sdk.paged.objects import ObjectEngine, ObjectIO
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


def test_storage_first_copy_wins_on_every_path() -> None:
    """Through ``batch_set_v1`` (the column fast path) and ``batch_set_v2`` over a
    transport that would keep the last copy: the first copy is stored, all report True."""
    import torch

    from hicache_sdk.hostpool import MHAHostPool
    from hicache_sdk.memory import MemoryStorage
    from hicache_sdk.spec import HiCacheStorageConfig

    made: list[LastCopyWins] = []

    class Backend(MemoryStorage):  # type: ignore[misc]
        def create_transport(self, config: object) -> LastCopyWins:
            t = LastCopyWins()
            made.append(t)
            return t

    for scheme in ("default", "sglang-file", "sglang-mooncake"):
        sc = HiCacheStorageConfig(model_name="m", extra_config={"key_scheme": scheme})
        s = Backend(sc, {})
        pool = MHAHostPool(16, 4, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False)
        s.register_mem_pool_host(pool)
        flat0 = pool.get_data_page(0, flat=True)
        nbytes = flat0.numel() * flat0.element_size()
        for p in range(4):  # page p holds byte p + 1 everywhere
            fill = torch.full((nbytes,), p + 1, dtype=torch.uint8).view(flat0.dtype)
            pool.set_from_flat_data_page(p * 4, fill)
        k, other = "a" * 64, "b" * 64
        idx = torch.arange(12, dtype=torch.int64)  # pages 0, 1, 2
        assert s.batch_set_v1([k, other, k], idx) == [True, True, True]
        assert all(len(set(b)) == len(b) for b in made[-1].batches), (
            f"{scheme}: duplicates reached the transport"
        )
        dst = torch.arange(12, 16, dtype=torch.int64)  # page 3
        assert s.batch_get_v1([k], dst) == [True]
        got = pool.get_data_page(12, flat=True).view(torch.uint8)
        assert int(got[0]) == 1 and bool((got == 1).all()), f"{scheme}: a later copy won"
        s.close()
