"""The column fast path (:mod:`hicache_sdk.paged.columns`) describes exactly the objects
the per-object path does: same names, same memory (adjacent segments merged), same stored
sizes, for every key scheme and every pool layout it accepts; and a batch written by one
path reads back through the other."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_sdk.hostpool import MHAHostPool, MLAHostPool
from hicache_sdk.hostpool.describe import page_segments
from hicache_sdk.kit.segments import coalesce
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.paged.columns import build_columns
from hicache_sdk.paged.header import TRAILER_SIZE
from hicache_sdk.spec import HiCacheStorageConfig

POOLS = {
    "mha-page_first": lambda: MHAHostPool(64, 4, 3, 2, 8, layout="page_first"),
    "mha-page_first_direct": lambda: MHAHostPool(64, 4, 3, 2, 8, layout="page_first_direct"),
    "mha-asym": lambda: MHAHostPool(64, 4, 2, 2, 8, v_head_dim=4, dtype=torch.float16),
    "mla-page_first": lambda: MLAHostPool(64, 4, 3, 12, 4, layout="page_first"),
    "mha-layer_first": lambda: MHAHostPool(64, 4, 3, 2, 8, layout="layer_first"),
}


def make(scheme: str, pool_name: str, store: str) -> tuple[MemoryStorage, Any]:
    pool = POOLS[pool_name]()
    mla = pool_name.startswith("mla")
    sc = HiCacheStorageConfig(
        is_mla_model=mla, model_name="m", extra_config={"store": store, "key_scheme": scheme}
    )
    s = MemoryStorage(sc, {})
    s.register_mem_pool_host(pool)
    return s, pool


@pytest.mark.parametrize("scheme", ["default", "sglang-file", "sglang-mooncake"])
@pytest.mark.parametrize("pool_name", sorted(POOLS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_columns_equal_the_per_object_path(scheme: str, pool_name: str, data: st.DataObject) -> None:
    store = f"cols-{scheme}-{pool_name}"
    s, pool = make(scheme, pool_name, store)
    try:
        kv = s._kv
        assert kv is not None
        n_slots_pages = pool.size // pool.page_size
        pages = data.draw(st.lists(st.integers(0, n_slots_pages - 1), min_size=0, max_size=6))
        keys = [hashlib.sha256(str(p).encode()).hexdigest()[: data.draw(st.integers(8, 64))] for p in pages]
        starts = [p * pool.page_size for p in pages]
        try:
            expect = [
                kv.objects(s.scheme, k, segs) for k, segs in zip(keys, page_segments(pool, kv.layout, starts))
            ]
        except ValueError:
            with pytest.raises(ValueError):
                build_columns(kv, s.scheme, keys, starts)
            return
        cols = build_columns(kv, s.scheme, keys, starts)
        assert cols is not None  # every pool here has linear page memory
        flat = [
            o for c in range(max(len(e) for e in expect) if expect else 0) for o in (e[c] for e in expect)
        ]
        assert cols.names == [o.name for o in flat]
        assert cols.sizes == [o.object_size for o in flat]
        for o, got in zip(flat, cols.buffers):
            payload = got[:-1] if o.has_header else got
            assert payload == coalesce(o.segments)
            if o.has_header:
                assert got[-1][1] == TRAILER_SIZE
        names_only = build_columns(kv, s.scheme, keys, None)
        assert names_only is not None and names_only.names == cols.names
    finally:
        s.close()
        drop_store(store)


@pytest.mark.parametrize("scheme", ["default", "sglang-file", "sglang-mooncake"])
def test_fast_and_per_object_paths_read_each_others_pages(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hicache_sdk.paged.adapter as adapter

    store = f"cols-x-{scheme}"
    w, src = make(scheme, "mha-page_first", store)
    r, dst = make(scheme, "mha-page_first", store)
    try:
        src.kv_buffer.view(torch.uint8).copy_(
            torch.randint(0, 256, src.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
        )
        keys = [hashlib.sha256(f"page{i}".encode()).hexdigest() for i in range(8)]
        slots = torch.arange(8 * 4)
        assert w.batch_set_v1(keys, slots) == [True] * 8  # fast path
        monkeypatch.setattr(adapter, "build_columns", lambda *a, **k: None)  # force the per-object path
        assert r.batch_exists(keys) == 8
        assert r.batch_get_v1(keys, slots) == [True] * 8
        assert torch.equal(dst.kv_buffer[:, :32].view(torch.uint8), src.kv_buffer[:, :32].view(torch.uint8))
        keys2 = [hashlib.sha256(f"other{i}".encode()).hexdigest() for i in range(8)]
        assert w.batch_set_v1(keys2, slots) == [True] * 8  # per-object path writes ...
        monkeypatch.undo()
        dst.kv_buffer.zero_()
        assert r.batch_get_v1(keys2, slots) == [True] * 8  # ... the fast path reads
        assert torch.equal(dst.kv_buffer[:, :32].view(torch.uint8), src.kv_buffer[:, :32].view(torch.uint8))
    finally:
        w.close()
        r.close()
        drop_store(store)
