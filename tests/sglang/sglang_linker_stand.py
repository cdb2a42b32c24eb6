"""Build hicache-sdk's ``TransportLinker`` the way SGLang 0.5.23 does, over real CPU device
pools: ``create_unified_cache_linker(server_args, params, backend="dynamic", config=...,
components=...)`` with SGLang's own ``CacheInitParams`` and ``MHATokenToKVPool`` /
``MLATokenToKVPool``. Only imported when the real SGLang is installed."""

from __future__ import annotations

import hashlib
import uuid
from types import SimpleNamespace
from typing import Any

import torch
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker
from sglang_pools import DTYPE, HEAD_DIM, HEADS, KV_LORA_RANK, LAYERS, PAGE_SIZE, QK_ROPE_HEAD_DIM

from hicache_sdk.bench.linker import fill_buffers

DEVICE_TOKENS = 64


def device_pool(kind: str = "mha", seed: int | None = None) -> Any:
    """A real SGLang device pool on CPU (``mha`` or ``mla``), filled from ``seed`` (else zero)."""
    if kind == "mha":
        pool = MHATokenToKVPool(DEVICE_TOKENS, PAGE_SIZE, DTYPE, HEADS, HEAD_DIM, LAYERS, "cpu", False)
        bufs = [*pool.k_buffer, *pool.v_buffer]
    else:
        pool = MLATokenToKVPool(
            DEVICE_TOKENS, PAGE_SIZE, DTYPE, KV_LORA_RANK, QK_ROPE_HEAD_DIM, LAYERS, "cpu", False
        )
        bufs = list(pool.kv_buffer)
    fill_buffers(bufs, seed)
    return pool


#: The SWA model of :func:`swa_pool`: its global layers, full attention and sliding window.
SWA_FULL_LAYERS, SWA_LAYERS = [0, 2], [1]
SWA_DEVICE_TOKENS = 32


def swa_pool(seed: int | None = None) -> Any:
    """A real SGLang ``SWAKVPool`` on CPU (two MHA sub-pools: full attention on layers 0
    and 2, a sliding window on layer 1), filled from ``seed`` (else zero)."""
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    pool = SWAKVPool(
        size=DEVICE_TOKENS,
        size_swa=SWA_DEVICE_TOKENS,
        page_size=PAGE_SIZE,
        dtype=DTYPE,
        head_num=HEADS,
        head_dim=HEAD_DIM,
        swa_attention_layer_ids=SWA_LAYERS,
        full_attention_layer_ids=SWA_FULL_LAYERS,
        device="cpu",
    )
    fill_buffers(
        [b for sub in (pool.full_kv_pool, pool.swa_kv_pool) for b in (*sub.k_buffer, *sub.v_buffer)], seed
    )
    return pool


def sub_pool_bytes(sub: Any, slots: torch.Tensor) -> list[bytes]:
    """Every layer's bytes of ``slots`` in one MHA sub-pool (K then V per layer)."""
    return [layer_bytes(sub, layer, slots) for layer in range(len(sub.k_buffer))]


def layer_bytes(pool: Any, layer: int, slots: torch.Tensor) -> bytes:
    """The bytes of ``slots`` in one layer of a device pool (K then V for MHA)."""
    bufs = (
        [pool.k_buffer[layer], pool.v_buffer[layer]] if hasattr(pool, "k_buffer") else [pool.kv_buffer[layer]]
    )
    return b"".join(bytes(b[slots].contiguous().view(torch.uint8).numpy()) for b in bufs)


def flat_page(pool: Any, page_slots: torch.Tensor) -> bytes:
    """A device page as the HiCache path stores it (``layer_first`` flat order): every K
    layer, then every V layer."""
    k = [bytes(pool.k_buffer[i][page_slots].contiguous().view(torch.uint8).numpy()) for i in range(LAYERS)]
    v = [bytes(pool.v_buffer[i][page_slots].contiguous().view(torch.uint8).numpy()) for i in range(LAYERS)]
    return b"".join(k) + b"".join(v)


def all_bytes(pool: Any, slots: torch.Tensor) -> list[bytes]:
    return [layer_bytes(pool, layer, slots) for layer in range(LAYERS)]


def linker_config(backend: str, backend_config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "linker": "TransportLinker",
        "linker_module_path": "hicache_sdk.sglang.linker",
        "linker_extra_config": {"backend": backend, "backend_config": backend_config, **extra},
    }


def build(
    pool: Any,
    config: dict[str, Any],
    *,
    model: str,
    components: set[Any] | None = None,
    module_class: tuple[str, str] | None = None,
    req_pool: Any = None,
    page_size: int = PAGE_SIZE,
) -> Any:
    """A linker built by SGLang's own factory over ``pool`` (``req_pool``: the request
    pool, which holds a hybrid Mamba model's state; ``page_size``: the tree's page size)."""
    if module_class is not None:
        config = {**config, "linker_module_path": module_class[0], "linker": module_class[1]}
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
        page_size=page_size,
    )
    server_args = SimpleNamespace(model_path=model, tp_size=1)
    return create_unified_cache_linker(
        server_args,
        params,
        backend="dynamic",
        config=config,
        components=components if components is not None else {ComponentType.FULL},
    )


def page_keys(n: int, salt: str = "") -> list[str]:
    base = uuid.uuid4().hex + salt
    return [hashlib.sha256(f"{base}-{i}".encode()).hexdigest() for i in range(n)]


def slots(first_page: int, n_pages: int, page_size: int = PAGE_SIZE) -> torch.Tensor:
    """The device slots of ``n_pages`` pages from page ``first_page``."""
    return torch.arange(first_page * page_size, (first_page + n_pages) * page_size, dtype=torch.int64)


def transfer(keys: list[str], indices: torch.Tensor | None) -> list[Any]:
    return [PoolTransfer(name=PoolName.KV, keys=list(keys), device_indices=indices)]


def swa_transfers(
    keys: list[str], indices: torch.Tensor | None, window: list[str], swa_indices: torch.Tensor | None
) -> list[Any]:
    """The KV transfer and the SWA transfer of the trailing window, as SGLang's SWA
    component builds them (``TRAILING_PAGES``; its slots are the SWA pool's)."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy

    return [
        *transfer(keys, indices),
        PoolTransfer(
            name=PoolName.SWA,
            keys=list(window),
            device_indices=swa_indices,
            hit_policy=PoolHitPolicy.TRAILING_PAGES,
        ),
    ]
