"""The bridge's own decisions, without SGLang: ``interface_v1`` per backend, host layouts it
refuses at ``on_host_pools_registered``, and an idempotent ``close()``."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any, List, Optional

import pytest
import torch

from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage
from hicache_sdk.sglang.checks import implements_v1
from hicache_sdk.spec import HiCacheStorage, HiCacheStorageConfig, PoolName

CLOSES: list[str] = []


class GenericOnly(HiCacheStorage):
    """A ``module:Class`` backend with only the generic path (no v1), over a memory backend."""

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        self.mem = MemoryStorage(storage_config, {})

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem.register_mem_pool_host(mem_pool_host)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.mem.get(key, target_location, target_sizes)

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        return self.mem.batch_get(keys, target_locations, target_sizes)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.mem.set(key, value, target_location, target_sizes)

    def batch_set(
        self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        return self.mem.batch_set(keys, values, target_locations, target_sizes)

    def exists(self, key: str) -> bool:
        return self.mem.exists(key)

    def batch_exists(self, keys: List[str], extra_info: Optional[Any] = None) -> int:
        return self.mem.batch_exists(keys, extra_info)


class CountingClose(MemoryStorage):
    def close(self) -> None:
        CLOSES.append(self.config.store)
        super().close()


@pytest.fixture
def store() -> Iterator[str]:
    name = f"checks-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def _config(backend: str, store: str, **extra: Any) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        extra_config={**BRIDGE_EXTRA_CONFIG, "backend": backend, "backend_config": {"store": store}, **extra}
    )


def _keys(n: int) -> list[str]:
    return [hashlib.sha256(f"{uuid.uuid4()}:{i}".encode()).hexdigest() for i in range(n)]


# -- interface_v1 ----------------------------------------------------------------------------


def test_v1_detection_sees_overrides_not_abc_defaults() -> None:
    assert implements_v1(MemoryStorage.__new__(MemoryStorage)) is True
    assert implements_v1(GenericOnly.__new__(GenericOnly)) is False


def test_module_class_backend_without_v1_gets_the_generic_path(store: str) -> None:
    cfg = HiCacheStorageConfig(
        extra_config={**BRIDGE_EXTRA_CONFIG, "backend": f"{__name__}:GenericOnly", "store": store}
    )
    assert cfg.extra_config["interface_v1"] == 1  # the flags asked for v1
    bridge = HiCacheSDKStorage(cfg, {})
    # SGLang reads this dict after construction: falsy -> _generic_page_get/_generic_page_set.
    assert cfg.extra_config["interface_v1"] == 0
    assert bridge.interface_v1 is False
    # ... and the generic path keeps its L3 hits.
    pool = MHAHostPool(16, 4, 2, 2, 8, layout="page_first")
    bridge.register_mem_pool_host(pool)
    bridge.on_host_pools_registered()
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(1)))
    keys = _keys(2)
    pages = [pool.get_data_page(s, flat=True) for s in (0, 4)]
    assert bridge.batch_set(keys, pages) is True
    assert bridge.batch_exists(keys) == 2
    got = bridge.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
    assert isinstance(got, list)
    for want, page in zip(pages, got):
        assert torch.equal(page.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize(("given", "expected"), [(None, 1), (1, 1), (True, 1), (0, 0), (False, 0)])
def test_v1_backend_gets_v1_unless_turned_off(store: str, given: Any, expected: int) -> None:
    extra = {k: v for k, v in BRIDGE_EXTRA_CONFIG.items() if k != "interface_v1"}
    if given is not None:
        extra["interface_v1"] = given
    cfg = HiCacheStorageConfig(
        extra_config={**extra, "backend": "memory", "backend_config": {"store": store}}
    )
    bridge = HiCacheSDKStorage(cfg, {})
    assert cfg.extra_config["interface_v1"] == expected
    assert bridge.interface_v1 is bool(expected)


# -- host layouts ----------------------------------------------------------------------------


def _register(bridge: HiCacheSDKStorage, pool: Any) -> None:
    bridge.register_mem_pool_host(pool)
    bridge.register_mem_host_pool_v2(pool, PoolName.KV)


def test_page_head_with_head_split_is_refused(store: str) -> None:
    cfg = _config("memory", store)
    cfg.tp_lcm_size = 4
    cfg.should_split_heads = True
    bridge = HiCacheSDKStorage(cfg, {})
    _register(bridge, MHAHostPool(16, 4, 2, 4, 8, layout="page_head"))
    with pytest.raises(ValueError, match=r"'page_head'.*tp_lcm_size=4"):
        bridge.on_host_pools_registered()


def test_page_head_without_head_split_is_served(store: str) -> None:
    bridge = HiCacheSDKStorage(_config("memory", store), {})
    pool = MHAHostPool(16, 4, 2, 4, 8, layout="page_head")
    _register(bridge, pool)
    bridge.on_host_pools_registered()
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(2)))
    want = pool.get_data_page(0, flat=True).view(torch.uint8).clone()
    keys = _keys(1)
    assert bridge.batch_set_v1(keys, torch.arange(0, 4)) == [True]
    assert bridge.batch_get_v1(keys, torch.arange(8, 12)) == [True]
    assert torch.equal(pool.get_data_page(8, flat=True).view(torch.uint8), want)


class UnifiedLike(MHAHostPool):
    storage_format_tag = "unified-token-major"


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: UnifiedLike(16, 4, 2, 2, 8, layout="page_first"),
            "unified page-envelope.*unified-token-major",
        ),
        (
            lambda: _relabel(MHAHostPool(16, 4, 2, 2, 8, layout="page_first"), "page_unified"),
            "'page_unified'",
        ),
        (
            lambda: _relabel(MHAHostPool(16, 4, 2, 2, 8, layout="page_first"), "page_first_kv_split"),
            "'page_first_kv_split'",
        ),
    ],
)
def test_unservable_pools_fail_the_attach(store: str, make: Any, match: str) -> None:
    bridge = HiCacheSDKStorage(_config("memory", store), {})
    _register(bridge, make())
    with pytest.raises(ValueError, match=match):
        bridge.on_host_pools_registered()


def test_an_unservable_sidecar_pool_is_named(store: str) -> None:
    bridge = HiCacheSDKStorage(_config("memory", store), {})
    kv = MHAHostPool(16, 4, 2, 2, 8, layout="page_first")
    _register(bridge, kv)
    bridge.register_mem_host_pool_v2(UnifiedLike(16, 4, 2, 2, 8, layout="page_first"), "swa")
    with pytest.raises(ValueError, match="host pool 'swa'"):
        bridge.on_host_pools_registered()


def _relabel(pool: MHAHostPool, layout: str) -> MHAHostPool:
    pool.layout = layout
    return pool


# -- close -----------------------------------------------------------------------------------


def test_close_is_idempotent_across_attach_and_detach(store: str) -> None:
    CLOSES.clear()
    backend = f"{__name__}:CountingClose"
    first = HiCacheSDKStorage(_config(backend, store), {})
    first.close()  # detach
    first.close()  # a second detach / failed re-attach cleanup
    second = HiCacheSDKStorage(_config(backend, store), {})  # re-attach: a new bridge
    second.close()
    second.close()
    assert [store, store] == CLOSES


def test_close_of_a_bridge_whose_construction_failed_is_a_no_op() -> None:
    HiCacheSDKStorage.__new__(HiCacheSDKStorage).close()
