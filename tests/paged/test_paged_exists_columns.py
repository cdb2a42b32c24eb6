"""``batch_exists``' column path against the per-object path: the same hits, the same
errors, the same wrong-sized objects deleted, the same metrics -- for every key scheme, with
and without sizes from the transport; and ``batch_exists_v2`` over several pools."""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_helpers import hkey, mha, mla, randomize, scattered_slots

import hicache_sdk.paged.adapter as adapter_mod
from hicache_sdk import SIZE_UNKNOWN
from hicache_sdk.memory import MemoryStorage, MemoryTransport, drop_store
from hicache_sdk.spec import HiCacheStorageConfig, PoolHitPolicy, PoolName, PoolTransfer


class NoSizes(MemoryTransport):
    """Answers like Mooncake: present objects with an unknown size."""

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        return [None if s is None else SIZE_UNKNOWN for s in super().exists(keys)]


class NoSizesStorage(MemoryStorage):
    transport_cls = NoSizes

    def create_transport(self, config: Any) -> NoSizes:  # MemoryStorage's names MemoryTransport
        return NoSizes(store=config.store, capacity_bytes=config.capacity_bytes)


SCHEMES = ["default", "sglang-file", "sglang-mooncake"]


def _storage(scheme: str, kind: str, sizes: bool) -> tuple[MemoryStorage, str]:
    store = f"plan-{uuid.uuid4().hex}"
    cls = MemoryStorage if sizes else NoSizesStorage
    sc = HiCacheStorageConfig(
        model_name="m", is_mla_model=kind == "mla", extra_config={"store": store, "key_scheme": scheme}
    )
    s = cls(sc, {})
    assert type(s.raw_transport) is (MemoryTransport if sizes else NoSizes)
    s.register_mem_pool_host(randomize(mha() if kind == "mha" else mla(), 1))
    return s, store


def _assert_same_state(fast: MemoryStorage, slow: MemoryStorage) -> None:
    """The same objects left in both stores and the same storage-level figures (times aside)."""
    assert sorted(fast.raw_transport._store.objects) == sorted(slow.raw_transport._store.objects)  # type: ignore[attr-defined]
    snaps = [s.metrics.snapshot() for s in (fast, slow)]
    for snap in snaps:
        # transport-level figures may differ: the column path asks a repeated key again
        snap["ops"] = {name: op for name, op in snap["ops"].items() if not name.startswith("t_")}
        for op in snap["ops"].values():
            del op["seconds"], op["latency_counts"]
    assert snaps[0] == snaps[1]


KEY = st.one_of(
    st.integers(0, 5).map(hkey),  # SGLang's hashes: the fast path
    st.sampled_from(["plain-key", "a/b", "", "..", "é", "x\x01"]),
    st.sampled_from([None, 7, b"k"]),
)


def _outcome(s: MemoryStorage, keys: Any, per_object: bool = False) -> tuple[str, object]:
    with pytest.MonkeyPatch.context() as mp:
        if per_object:  # no column batch: the adapter goes page by page
            mp.setattr(adapter_mod, "build_columns", lambda *a, **k: None)
        try:
            return "ok", s.batch_exists(keys)
        except Exception as e:  # the same error type and message on both paths
            return type(e).__name__, str(e)


@settings(max_examples=40)
@given(
    scheme=st.sampled_from(SCHEMES),
    kind=st.sampled_from(["mha", "mla"]),
    sizes=st.booleans(),
    stored=st.lists(st.booleans(), min_size=6, max_size=6),
    wrong=st.lists(st.booleans(), min_size=6, max_size=6),
    keys=st.one_of(st.lists(KEY, max_size=7), st.tuples(KEY, KEY), st.just("not-a-list")),
)
def test_column_path_equals_the_object_path(
    scheme: str, kind: str, sizes: bool, stored: list[bool], wrong: list[bool], keys: Any
) -> None:
    pair = [_storage(scheme, kind, sizes) for _ in range(2)]
    try:
        for s, _ in pair:  # identical contents: stored pages, and wrong-sized objects planted
            for i in range(6):
                if stored[i]:
                    assert s.batch_set_v1([hkey(i)], scattered_slots(s.mem_pool_host, 1, seed=i)) == [True]
                elif wrong[i]:
                    assert s._kv is not None
                    spec = s.scheme.page_columns([hkey(i)], s._kv.layout)
                    assert spec is not None
                    buf = ctypes.create_string_buffer(3)
                    s.raw_transport.write([spec[0][0][0]], [[(ctypes.addressof(buf), 3)]])
        fast, slow = pair[0][0], pair[1][0]
        assert _outcome(fast, keys) == _outcome(slow, keys, per_object=True)
        _assert_same_state(fast, slow)  # wrong-sized objects deleted alike, the same figures
    finally:
        for _, store in pair:
            drop_store(store)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sglang_hashes_hit(scheme: str) -> None:
    s, store = _storage(scheme, "mha" if scheme != "sglang-mooncake" else "mla", True)
    try:
        keys = [hkey(i) for i in range(4)]
        assert s.batch_set_v1(keys[:3], scattered_slots(s.mem_pool_host, 3)) == [True] * 3
        assert s.batch_exists(keys) == 3 and s.batch_exists(keys[:3]) == 3 and s.batch_exists([]) == 0
        with pytest.raises(ValueError, match="page_hash"):
            s.batch_exists(["a/b"])  # the checked path names what is wrong
        s.close()
        assert s.batch_exists(keys) == 0  # after close: a miss, as on the checked path
    finally:
        drop_store(store)


# -- batch_exists_v2 ----------------------------------------------------------------------


def _v2_storage(scheme: str, sizes: bool, logical: bool) -> tuple[MemoryStorage, str]:
    from paged_helpers import mamba, swa

    store = f"plan2-{uuid.uuid4().hex}"
    cls = MemoryStorage if sizes else NoSizesStorage
    s = cls(HiCacheStorageConfig(model_name="m", extra_config={"store": store, "key_scheme": scheme}), {})
    s.register_mem_pool_host(mha(logical=True) if logical else randomize(mha(), 1))
    s.register_mem_host_pool_v2(randomize(mamba(), 2), PoolName.MAMBA)
    s.register_mem_host_pool_v2(randomize(swa(), 3), PoolName.SWA)
    return s, store


def test_v2_hits_for_sglang_hashes() -> None:
    s, store = _v2_storage("sglang-mooncake", True, False)
    try:
        keys = [hkey(i) for i in range(4)]
        assert s.batch_set_v1(keys[:3], scattered_slots(s.mem_pool_host, 3)) == [True] * 3
        mamba_pool = s._pools["mamba"].pool
        t = PoolTransfer(PoolName.MAMBA, scattered_slots(mamba_pool, 2), keys=keys[:2])
        assert s.batch_set_v2([t]) == {"mamba": [True, True]}
        q = [PoolTransfer(PoolName.MAMBA, keys=keys, hit_policy=PoolHitPolicy.ALL_PAGES)]
        r = s.batch_exists_v2(keys, q)
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (2, {"kv": 3, "mamba": 2})
        s.close()
        assert s.batch_exists_v2(keys, q).kv_hit_pages == 0  # after close: misses
    finally:
        drop_store(store)
    s, store = _v2_storage("sglang-mooncake", True, True)  # a logical KV anchor: the pools alone
    try:
        mamba_pool = s._pools["mamba"].pool
        assert s.batch_set_v2([PoolTransfer(PoolName.MAMBA, scattered_slots(mamba_pool, 1), keys=keys[:1])])
        r = s.batch_exists_v2(
            keys, [PoolTransfer(PoolName.MAMBA, keys=keys, hit_policy=PoolHitPolicy.ALL_PAGES)]
        )
        assert r.kv_hit_pages == 1
    finally:
        drop_store(store)


@pytest.mark.parametrize("sizes", [True, False])
def test_v2_needs_every_object_of_a_page(sizes: bool) -> None:
    """K and V per page under ``sglang-mooncake``: a page with only its V object is no hit."""
    s, store = _v2_storage("sglang-mooncake", sizes, False)
    try:
        keys = [hkey(i) for i in range(3)]
        assert s.batch_set_v1(keys[:1], scattered_slots(s.mem_pool_host, 1)) == [True]
        assert s._kv is not None
        spec = s.scheme.page_columns([keys[1]], s._kv.layout)
        assert spec is not None and len(spec) == 2
        size = sum(s._kv.layout.segment_sizes[j] for j in spec[1][1])
        buf = ctypes.create_string_buffer(size)
        assert s.raw_transport.write([spec[1][0][0]], [[(ctypes.addressof(buf), size)]]) == [True]
        r = s.batch_exists_v2(keys, [])
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (1, {"kv": 1})
        assert s.batch_exists(keys) == 1
    finally:
        drop_store(store)
