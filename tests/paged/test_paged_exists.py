"""Existence: batch_exists against a brute-force count, batch_exists_v2 folding over the
KV hashes, one transport call per query."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from paged_helpers import RecordingStorage, StorageFactory, hkey, mamba, mha, randomize, scattered_slots, swa

from hicache_sdk.spec import PoolHitPolicy, PoolName, PoolTransfer


@given(present=st.lists(st.booleans(), max_size=9), salt=st.integers(0, 10**9))
def test_batch_exists_matches_brute_force(present: list[bool], salt: int) -> None:
    import uuid

    from hicache_sdk.memory import MemoryStorage, drop_store
    from hicache_sdk.spec import HiCacheStorageConfig

    store = f"bf-{uuid.uuid4().hex}"
    pool = randomize(mha(), 1)
    s = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config={"store": store}), {})
    s.register_mem_pool_host(pool)
    keys = [hkey(i, f"bf{salt}") for i in range(len(present))]
    stored = [k for k, p in zip(keys, present) if p]
    if stored:
        assert s.batch_set_v1(stored, scattered_slots(pool, len(stored))) == [True] * len(stored)
    expected = next((i for i, p in enumerate(present) if not p), len(present))
    assert s.batch_exists(keys) == expected
    assert [s.exists(k) for k in keys] == present
    drop_store(store)


def test_batch_exists_one_call_with_the_names_as_given(make_storage: StorageFactory) -> None:
    """One transport call; a repeated page key is asked again rather than deduplicated
    (the transport answers duplicates alike, and a set of every batch's keys would cost
    each query more than the rare repeat saves)."""
    s = make_storage(randomize(mha(), 1), cls=RecordingStorage)
    k = [hkey(0), hkey(1), hkey(0)]
    s.batch_set_v1(k[:2], scattered_slots(s.mem_pool_host, 2))
    s.raw_transport.calls.clear()  # type: ignore[attr-defined]
    assert s.batch_exists(k) == 3
    assert s.batch_exists([*k, hkey(2), hkey(0)]) == 3
    calls = s.raw_transport.calls  # type: ignore[attr-defined]
    assert [c[0] for c in calls] == ["exists", "exists"] and [len(c[1]) for c in calls] == [3, 5]


def _setup(make_storage: StorageFactory, logical: bool = False):  # type: ignore[no-untyped-def]
    kv = mha(logical=logical) if logical else randomize(mha(), 1)
    m, w = randomize(mamba(), 2), randomize(swa(), 3)
    s = make_storage(kv, cls=RecordingStorage, sidecars={"mamba": m, "swa": w})
    return s, kv, m, w


def _put(s, name, pool, keys):  # type: ignore[no-untyped-def]
    if keys:
        res = s.batch_set_v2([PoolTransfer(PoolName(name), scattered_slots(pool, len(keys)), keys=keys)])
        assert res == {name: [True] * len(keys)}


def test_exists_v2_mamba_sparse_endpoints(make_storage: StorageFactory) -> None:
    s, kv, m, _ = _setup(make_storage)
    keys = [hkey(i, "m") for i in range(6)]
    _put(s, "kv", kv, keys[:5])
    _put(s, "mamba", m, [keys[1], keys[3], keys[5]])
    s.raw_transport.calls.clear()  # type: ignore[attr-defined]
    t = PoolTransfer(PoolName.MAMBA, keys=["__placeholder__"], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    r = s.batch_exists_v2(keys, [t])
    assert s.raw_transport.ops() == ["exists"]  # type: ignore[attr-defined]
    assert r.kv_hit_pages == 4
    assert r.restorable_prefix_pages == [2, 4]
    assert r.extra_pool_hit_pages == {"kv": 5, "mamba": 4}


def test_exists_v2_swa_window_and_all_pages(make_storage: StorageFactory) -> None:
    s, kv, _, w = _setup(make_storage)
    keys = [hkey(i, "w") for i in range(5)]
    _put(s, "kv", kv, keys)
    _put(s, "swa", w, keys[2:4])
    t = PoolTransfer(PoolName.SWA, keys=["a", "b"], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    r = s.batch_exists_v2(keys, [t])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (4, [4])
    r2 = s.batch_exists_v2(keys, [PoolTransfer(PoolName.SWA, keys=keys, hit_policy=PoolHitPolicy.ALL_PAGES)])
    assert r2.kv_hit_pages == 0 and r2.extra_pool_hit_pages == {"kv": 5}
    r3 = s.batch_exists_v2(keys, [])
    assert r3.kv_hit_pages == 5 and r3.restorable_prefix_pages == [1, 2, 3, 4, 5]
    assert s.batch_exists_v2([hkey(99)], [t]).kv_hit_pages == 0


def test_exists_v2_logical_anchor(make_storage: StorageFactory) -> None:
    s, _, m, _ = _setup(make_storage, logical=True)
    keys = [hkey(i, "l") for i in range(4)]
    _put(s, "mamba", m, [keys[2]])
    t = PoolTransfer(PoolName.MAMBA, keys=["x"], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    r = s.batch_exists_v2(keys, [t])
    assert r.kv_hit_pages == 3 and r.restorable_prefix_pages == [3]
