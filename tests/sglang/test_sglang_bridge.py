"""The bridge inside the real SGLang 0.5.23 (collected only with ``HICACHE_SGLANG_ENV=1``).

SGLang's own ``StorageBackendFactory`` builds our ``memory`` backend through its
``dynamic`` loader on SGLang's own MHA (layer_first, page_first) and MLA host pools, and
pages round-trip byte-exact through the zero-copy v1 path, the generic path (the flat
pages SGLang's controller moves) and v2, with SGLang's own transfer and result types.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sglang_standins
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.observability.metrics_collector import StorageMetrics as SGLStorageMetrics
from sglang_pools import PAGE_SIZE, POOLS

from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage, sglang_storage_base


def _keys(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha256(f"{salt}page{i}".encode()).hexdigest() for i in range(n)]


def _storage_config(extra: dict[str, Any], *, mla: bool, layout: str) -> Any:
    return sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=True,
        is_page_first_layout=layout == "page_first",
        model_name="test-model",
        extra_config=extra,
    )


def _page(pool: Any, start: int) -> torch.Tensor:
    return pool.get_data_page(start, flat=True).view(torch.uint8).clone()


def _all_pages(pool: Any) -> list[torch.Tensor]:
    return [_page(pool, s) for s in range(0, pool.size, PAGE_SIZE)]


def _randomize(pool: Any, seed: int) -> None:
    raw = pool.kv_buffer.view(torch.uint8)
    gen = torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))


def _starts(indices: torch.Tensor) -> list[int]:
    return [int(indices[i]) for i in range(0, len(indices), PAGE_SIZE)]


@pytest.fixture(params=sorted(POOLS))
def setup(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str]]:
    """(bridge built by SGLang's factory and registered the way the controller does, its
    host pool, the pool's label)."""
    build, mla = POOLS[request.param]
    pool = build()
    store = f"sglang-{uuid.uuid4().hex}"
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}}
    cfg = _storage_config(extra, mla=mla, layout=pool.layout)
    backend = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    backend.register_mem_pool_host(pool)
    backend.register_mem_host_pool_v2(pool, sgl.PoolName.KV)
    backend.on_host_pools_registered()
    yield backend, pool, request.param
    backend.close()
    drop_store(store)


def test_environment_is_real_sglang() -> None:
    assert importlib.metadata.version("sglang") == "0.5.23"
    assert "site-packages" in (sgl.__file__ or "")
    assert sglang_standins.is_standin(sys.modules["triton"])
    # Nothing but triton/torchvision is a stand-in.
    stubbed = {n.split(".")[0] for n, m in list(sys.modules.items()) if sglang_standins.is_standin(m)}
    assert stubbed <= set(sglang_standins.STANDIN_ROOTS)
    assert sglang_storage_base() is sgl.HiCacheStorage
    assert issubclass(HiCacheSDKStorage, sgl.HiCacheStorage)


def test_factory_builds_the_bridge(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    assert type(backend) is HiCacheSDKStorage
    assert isinstance(backend, sgl.HiCacheStorage)
    assert isinstance(backend.inner, MemoryStorage)
    # The inner backend never sees the loader keys.
    assert "module_path" not in (backend.inner.storage_config.extra_config or {})
    assert backend.mem_pool_host is pool


def test_v1_zero_copy_roundtrip(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    _randomize(pool, 1)
    src = pool.alloc(3 * PAGE_SIZE)
    keys = _keys(3)
    expected = [_page(pool, s) for s in _starts(src)]
    assert backend.batch_set_v1(keys, src, sgl.HiCacheStorageExtraInfo()) == [True] * 3
    assert backend.batch_exists(keys, sgl.HiCacheStorageExtraInfo()) == 3
    assert backend.exists(keys[2]) is True
    dst = pool.alloc(3 * PAGE_SIZE)
    dst_starts = _starts(dst)
    for s in dst_starts:  # make the destination differ from the source first
        pool.set_from_flat_data_page(s, torch.zeros_like(pool.get_dummy_flat_data_page()))
    before = _all_pages(pool)
    assert backend.batch_get_v1(keys, dst) == [True] * 3
    after = _all_pages(pool)
    for i, s in enumerate(dst_starts):
        assert torch.equal(after[s // PAGE_SIZE], expected[i])
    untouched = set(range(len(before))) - {s // PAGE_SIZE for s in dst_starts}
    assert all(torch.equal(before[p], after[p]) for p in untouched)


def test_generic_path_roundtrip(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    _randomize(pool, 2)
    src = pool.alloc(2 * PAGE_SIZE)
    keys = _keys(2, "generic")
    expected = [_page(pool, s) for s in _starts(src)]
    values = [pool.get_data_page(s, flat=True) for s in _starts(src)]
    assert backend.batch_set(keys, values) is True
    dst = pool.alloc(2 * PAGE_SIZE)
    got = backend.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
    assert isinstance(got, list) and all(isinstance(t, torch.Tensor) for t in got)
    for i, s in enumerate(_starts(dst)):
        pool.set_from_flat_data_page(s, got[i])
        assert torch.equal(_page(pool, s), expected[i])
    # A missing key is None, aligned with keys.
    missing = backend.batch_get([*keys, _keys(1, "absent")[0]], [pool.get_dummy_flat_data_page()] * 3)
    assert isinstance(missing, list) and missing[2] is None and missing[0] is not None


def test_paths_interoperate(setup: tuple[Any, Any, str]) -> None:
    """SGLang switches paths with ``interface_v1``: a page written by one is read by the other."""
    backend, pool, _ = setup
    _randomize(pool, 3)
    src = pool.alloc(PAGE_SIZE)
    (key_v1,) = _keys(1, "v1")
    (key_gen,) = _keys(1, "gen")
    page = _page(pool, int(src[0]))
    assert backend.batch_set_v1([key_v1], src) == [True]
    assert backend.batch_set([key_gen], [pool.get_data_page(int(src[0]), flat=True)]) is True
    got = backend.batch_get([key_v1], [pool.get_dummy_flat_data_page()])
    assert isinstance(got, list) and torch.equal(got[0].view(torch.uint8), page)
    dst = pool.alloc(PAGE_SIZE)
    assert backend.batch_get_v1([key_gen], dst) == [True]
    assert torch.equal(_page(pool, int(dst[0])), page)


def test_partial_hits_are_misses_not_errors(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    src = pool.alloc(4 * PAGE_SIZE)
    keys = _keys(4, "partial")
    assert (
        backend.batch_set_v1(keys[:2] + keys[3:], torch.cat([src[: 2 * PAGE_SIZE], src[3 * PAGE_SIZE :]]))
        == [True] * 3
    )
    assert backend.batch_exists(keys) == 2
    assert backend.batch_get_v1(keys, pool.alloc(4 * PAGE_SIZE)) == [True, True, False, True]


def test_v2_takes_and_returns_sglang_types(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    _randomize(pool, 4)
    src = pool.alloc(2 * PAGE_SIZE)
    keys = _keys(2, "v2")
    expected = [_page(pool, s) for s in _starts(src)]
    info = sgl.HiCacheStorageExtraInfo(prefix_keys=None)
    put = backend.batch_set_v2([sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=src, keys=keys)], info)
    assert put == {"kv": [True, True]}
    result = backend.batch_exists_v2([*keys, _keys(1, "absent")[0]], [], info)
    assert type(result) is sgl.PoolTransferResult
    assert result.kv_hit_pages == 2
    result.update_kv_hit_pages(1)  # SGLang's own method works on it
    assert result.kv_hit_pages == 2
    dst = pool.alloc(2 * PAGE_SIZE)
    got = backend.batch_get_v2([sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=dst, keys=keys)], info)
    assert sgl.count_pool_hits(got) == {"kv": 2}
    assert got[sgl.PoolName.KV] == [True, True]  # SGLang indexes results by its PoolName
    for i, s in enumerate(_starts(dst)):
        assert torch.equal(_page(pool, s), expected[i])


def test_stats_are_sglang_storage_metrics(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    src = pool.alloc(PAGE_SIZE)
    assert backend.batch_set_v1(_keys(1, "stats"), src) == [True]
    stats = backend.get_stats()
    assert type(stats) is SGLStorageMetrics
    assert sum(stats.backup_pgs) == 1


def test_clear_removes_pages(setup: tuple[Any, Any, str]) -> None:
    backend, pool, _ = setup
    keys = _keys(2, "clear")
    assert backend.batch_set_v1(keys, pool.alloc(2 * PAGE_SIZE)) == [True, True]
    backend.clear()
    assert backend.batch_exists(keys) == 0


def test_sglang_failure_injector_wraps_the_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's own injector wraps the bridge; its failures surface as misses."""
    build, _ = POOLS["mha-page_first"]
    pool = build()
    store = f"sglang-{uuid.uuid4().hex}"
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}}
    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", "1.0")
    backend = StorageBackendFactory.create_backend(
        "dynamic", _storage_config(extra, mla=False, layout="page_first"), pool
    )
    try:
        assert isinstance(backend, sgl.HiCacheStorageFailureInjector)
        backend.register_mem_pool_host(pool)
        keys = _keys(2, "inject")
        assert backend.batch_set_v1(keys, pool.alloc(2 * PAGE_SIZE)) == [False, False]
        assert backend.batch_exists(keys) == 0
    finally:
        drop_store(store)


def test_missing_backend_name_fails_loudly() -> None:
    build, _ = POOLS["mha-page_first"]
    cfg = _storage_config(dict(BRIDGE_EXTRA_CONFIG), mla=False, layout="page_first")
    with pytest.raises(ValueError, match=r"extra_config\['backend'\].*memory"):
        StorageBackendFactory.create_backend("dynamic", cfg, build())


def test_unknown_backend_fails_loudly() -> None:
    build, _ = POOLS["mha-page_first"]
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": "no-such-backend"}
    cfg = _storage_config(extra, mla=False, layout="page_first")
    with pytest.raises(Exception, match="no-such-backend"):
        StorageBackendFactory.create_backend("dynamic", cfg, build())
