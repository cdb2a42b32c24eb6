"""``MooncakeTransport`` batches against a real master + holder: per-object answers when a
batch mixes hits, misses, wrong sizes, duplicate keys and several segments per object (the
all-good answer is a fast path; these take the per-object one)."""

from __future__ import annotations

import numpy as np
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeConfig, MooncakeTransport

from hicache_sdk.transport import SIZE_UNKNOWN, ExactSizes


def _transport(cluster: MooncakeCluster) -> MooncakeTransport:
    return MooncakeTransport(MooncakeConfig.from_mapping(cluster.config(), environ={}), 0)


def _segs(a: np.ndarray, pieces: int = 1) -> list[tuple[int, int]]:
    step = a.nbytes // pieces
    out = [(a.ctypes.data + i * step, step) for i in range(pieces - 1)]
    out.append((a.ctypes.data + (pieces - 1) * step, a.nbytes - (pieces - 1) * step))
    return out


def test_mixed_batch_answers_per_object(cluster: MooncakeCluster) -> None:
    t = _transport(cluster)
    names = ["mt-mixed-a", "mt-mixed-b"]
    try:
        a = np.arange(5000, dtype=np.uint32).view(np.uint8).copy()
        b = (np.arange(3000, dtype=np.uint16) * 7).view(np.uint8).copy()
        assert t.write(names, [_segs(a, 3), _segs(b)]) == [True, True]
        assert t.write(names, [_segs(b[:100]), _segs(a)]) == [True, True]  # existing: untouched
        keys = ["mt-mixed-a", "mt-mixed-never", "mt-mixed-a", "mt-mixed-b", "mt-mixed-b"]
        dsts = [np.full(a.nbytes, 0xEE, np.uint8), np.full(64, 0xEE, np.uint8), np.zeros(a.nbytes, np.uint8)]
        dsts += [np.zeros(b.nbytes, np.uint8), np.full(b.nbytes + 8, 0xEE, np.uint8)]
        got = t.read(
            keys, [_segs(dsts[0], 2), _segs(dsts[1]), _segs(dsts[2]), _segs(dsts[3], 4), _segs(dsts[4])]
        )
        # a twice (read once, copied), a miss, b whole, and b into a buffer of the wrong size
        assert got == [True, False, True, True, False]
        assert bytes(dsts[0]) == bytes(a) and bytes(dsts[2]) == bytes(a) and bytes(dsts[3]) == bytes(b)
        assert bytes(dsts[1]) == b"\xee" * 64
        # without duplicates: the wrong size is a miss beside a hit
        d1, d2 = np.zeros(a.nbytes, np.uint8), np.zeros(b.nbytes - 1, np.uint8)
        assert t.read(names, [_segs(d1), _segs(d2)]) == [True, False]
        assert bytes(d1) == bytes(a)
    finally:
        t.delete(names)
        t.close()


def test_exact_sizes_tell_what_exists_does_not(cluster: MooncakeCluster) -> None:
    t = _transport(cluster)
    names = ["mt-size-a", "mt-size-b"]
    try:
        a, b = np.ones(5000, np.uint8), np.ones(123, np.uint8)
        assert t.write(names, [_segs(a, 2), _segs(b)]) == [True, True]
        assert t.exists([*names, "mt-size-never"]) == [SIZE_UNKNOWN, SIZE_UNKNOWN, None]
        assert t.offers(ExactSizes) is t
        assert t.exact_sizes([*names, "mt-size-never"]) == [5000, 123, None]
    finally:
        t.delete(names)
        t.close()
