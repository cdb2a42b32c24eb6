"""The bridge's own decisions inside the real SGLang 0.5.23 (collected only with
``HICACHE_SGLANG_ENV=1``): ``interface_v1`` as SGLang's controller reads it after its factory
built the bridge, the generic path of a backend without v1 on SGLang's own host pool, and the
refusal of ``page_head`` with SGLang's heterogeneous-TP head split."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import PAGE_SIZE, mha_pool

from hicache_sdk.memory import drop_store
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage


@pytest.fixture
def store() -> Iterator[str]:
    name = f"sglang-layouts-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def _config(extra: dict[str, Any], layout: str, **kw: Any) -> Any:
    return sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=kw.pop("tp_size", 1),
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=True,
        is_page_first_layout=layout == "page_first",
        model_name="test-model",
        extra_config=extra,
        **kw,
    )


def _controller_uses_v1(cfg: Any) -> bool:
    """cache_controller.py's own test for a dynamic backend (0.5.23, attach_storage_backend)."""
    return bool(cfg.extra_config.get("interface_v1", 0))


@pytest.mark.parametrize(
    ("backend", "v1"), [("memory", True), ("test_sglang_bridge_checks:GenericOnly", False)]
)
def test_factory_built_bridge_sets_interface_v1(store: str, backend: str, v1: bool) -> None:
    pool = mha_pool("page_first")
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": backend, "backend_config": {"store": store}}
    cfg = _config(extra, "page_first")
    assert _controller_uses_v1(cfg) is True  # what the flags asked for
    bridge = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    assert type(bridge) is HiCacheSDKStorage
    assert _controller_uses_v1(cfg) is v1
    bridge.register_mem_pool_host(pool)
    bridge.register_mem_host_pool_v2(pool, sgl.PoolName.KV)
    bridge.on_host_pools_registered()
    # The path the controller then takes (generic for the v1-less backend) keeps its hits.
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3)))
    src = pool.alloc(2 * PAGE_SIZE)
    starts = [int(src[0]), int(src[PAGE_SIZE])]
    want = [pool.get_data_page(s, flat=True).view(torch.uint8).clone() for s in starts]
    keys = [hashlib.sha256(f"{uuid.uuid4()}{i}".encode()).hexdigest() for i in range(2)]
    if v1:
        assert bridge.batch_set_v1(keys, src, sgl.HiCacheStorageExtraInfo()) == [True, True]
    else:
        assert bridge.batch_set(keys, [pool.get_data_page(s, flat=True) for s in starts]) is True
    assert bridge.batch_exists(keys, sgl.HiCacheStorageExtraInfo()) == 2
    got = bridge.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
    assert isinstance(got, list)
    for page, w in zip(got, want):
        assert torch.equal(page.contiguous().view(torch.uint8), w)
    bridge.close()
    bridge.close()


def test_page_head_with_head_split_fails_the_attach(store: str) -> None:
    pool = mha_pool("page_head")
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}}
    cfg = _config(extra, "page_head", tp_lcm_size=2, should_split_heads=True)
    bridge = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    bridge.register_mem_pool_host(pool)
    bridge.register_mem_host_pool_v2(pool, sgl.PoolName.KV)
    with pytest.raises(ValueError, match=r"'page_head'.*should_split_heads=True"):
        bridge.on_host_pools_registered()
    bridge.close()


def test_page_head_without_split_is_served_byte_exact(store: str) -> None:
    pool = mha_pool("page_head")
    extra = {**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}}
    bridge = StorageBackendFactory.create_backend("dynamic", _config(extra, "page_head"), pool)
    bridge.register_mem_pool_host(pool)
    bridge.register_mem_host_pool_v2(pool, sgl.PoolName.KV)
    bridge.on_host_pools_registered()
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(4)))
    src = pool.alloc(PAGE_SIZE)
    want = pool.get_data_page(int(src[0]), flat=True).view(torch.uint8).clone()
    key = [hashlib.sha256(uuid.uuid4().bytes).hexdigest()]
    assert bridge.batch_set_v1(key, src) == [True]
    dst = pool.alloc(PAGE_SIZE)
    assert bridge.batch_get_v1(key, dst) == [True]
    assert torch.equal(pool.get_data_page(int(dst[0]), flat=True).view(torch.uint8), want)
    bridge.close()
