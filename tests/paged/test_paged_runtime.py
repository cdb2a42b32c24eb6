"""Runtime behaviour: transport failures are misses, close/stats/clear, thread safety,
and the copy fallback for pools without zero-copy page meta."""

from __future__ import annotations

import threading
from typing import Any

import torch
from paged_helpers import (
    RecordingStorage,
    StorageFactory,
    hkey,
    indexer,
    mha,
    page_bytes,
    randomize,
    scattered_slots,
)

from hicache_sdk.spec import PoolName, PoolTransfer, StorageMetrics
from hicache_sdk.transport import TransportError

KEYS = [hkey(i, "rt") for i in range(3)]


def test_transport_errors_become_misses(make_storage: StorageFactory) -> None:
    pool = randomize(mha(), 1)
    s = make_storage(pool, cls=RecordingStorage, extra={"breaker_failures": 1000})
    slots = scattered_slots(pool, 3)
    assert s.batch_set_v1(KEYS, slots) == [True] * 3
    s.raw_transport.fail = TransportError("down", "connection")  # type: ignore[attr-defined]
    assert s.batch_exists(KEYS) == 0
    assert s.batch_get_v1(KEYS, slots) == [False] * 3
    assert s.batch_set_v1(KEYS, slots) == [False] * 3
    assert s.batch_get(KEYS) == [None] * 3
    assert s.batch_set(KEYS, [pool.get_dummy_flat_data_page()] * 3) is False
    assert s.batch_get_v2([PoolTransfer(PoolName.KV, slots, keys=KEYS)]) == {"kv": [False] * 3}
    assert s.batch_exists_v2(KEYS, []).kv_hit_pages == 0
    assert s.metrics.errors()["connection"] >= 7
    s.raw_transport.fail = RuntimeError("bug")  # type: ignore[attr-defined]
    assert s.batch_get_v1(KEYS, slots) == [False] * 3
    assert s.metrics.errors()["bug:RuntimeError"] >= 1
    assert ("read", "RuntimeError", "bug") in [(b.site, b.error, b.message) for b in s.metrics.bugs()]
    s.raw_transport.fail = None  # type: ignore[attr-defined]
    assert s.batch_exists(KEYS) == 3


def test_stats_drain_and_close(make_storage: StorageFactory) -> None:
    pool = randomize(mha(), 1)
    s = make_storage(pool)
    slots = scattered_slots(pool, 3)
    s.batch_set_v1(KEYS, slots)
    s.batch_get_v1(KEYS[:2], slots[:8])
    st = s.get_stats()
    assert isinstance(st, StorageMetrics)
    assert st.backup_pgs == [3] and st.prefetch_pgs == [2]
    assert s.get_stats() == StorageMetrics()
    s.close()
    s.close()
    assert s.batch_get_v1(KEYS, slots) == [False] * 3
    assert s.batch_exists(KEYS) == 0


def test_clear_only_own_namespace(make_storage: StorageFactory) -> None:
    pool = randomize(mha(), 1)
    a, b = make_storage(pool, extra={"namespace": "a"}), make_storage(pool, extra={"namespace": "b"})
    slots = scattered_slots(pool, 3)
    assert a.batch_set_v1(KEYS, slots) == [True] * 3 and b.batch_set_v1(KEYS, slots) == [True] * 3
    a.clear()
    assert a.batch_exists(KEYS) == 0 and b.batch_exists(KEYS) == 3


def test_four_threads(make_storage: StorageFactory) -> None:
    src = randomize(mha(), 7)
    s = make_storage(src)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            dst = mha()
            r = make_storage(dst)
            for rnd in range(15):
                keys = [hkey(i, f"t{rnd % 3}") for i in range(4)]
                slots = scattered_slots(src, 4, seed=rnd)
                assert s.batch_set_v1(keys, slots) == [True] * 4
                d = scattered_slots(dst, 4, seed=t)
                assert r.batch_get_v1(keys, d) == [True] * 4
                assert r.batch_exists(keys) == 4
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


class NoMetaIndexer:
    """An indexer pool without zero-copy meta (as SGLang's layer_first sidecars)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> Any:
        raise NotImplementedError("no zero-copy meta for this layout")


def test_copy_fallback_for_pools_without_meta(make_storage: StorageFactory) -> None:
    src, dst = NoMetaIndexer(randomize(indexer(), 3)), NoMetaIndexer(indexer())
    s = make_storage(mha(), sidecars={"indexer": src})
    r = make_storage(mha(), sidecars={"indexer": dst})
    ss, dd = scattered_slots(src, 3), scattered_slots(dst, 3, seed=2)
    assert s.batch_set_v2([PoolTransfer(PoolName.INDEXER, ss, keys=KEYS)]) == {"indexer": [True] * 3}
    assert r.batch_get_v2([PoolTransfer(PoolName.INDEXER, dd, keys=KEYS)]) == {"indexer": [True] * 3}
    for i in range(3):
        assert page_bytes(dst, int(dd[i * 4])) == page_bytes(src, int(ss[i * 4]))
