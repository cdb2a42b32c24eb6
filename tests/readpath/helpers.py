"""Builders shared by the read-path tests: a small MHA geometry over the memory backend."""

from __future__ import annotations

import itertools
from typing import Any

import torch

from hicache_sdk import HiCacheStorageConfig, MemoryStorage
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.readpath import CacheState, DevicePool, Engine, ReadPathConfig, StepRunner, VirtualClock

_stores = itertools.count()
GEOM = {"layer_num": 2, "head_num": 1, "head_dim": 4}


def new_store() -> str:
    return f"readpath-{next(_stores)}"


def make_storage(store: str, model: str = "m", rank: int = 0) -> Any:
    s = MemoryStorage(HiCacheStorageConfig(model_name=model, tp_rank=rank, extra_config={"store": store}), {})
    return s


def make_engine(
    cfg: ReadPathConfig,
    store: str | None = None,
    *,
    host_tokens: int = 512,
    dev_tokens: int = 256,
    dtype: torch.dtype = torch.float32,
    clock: Any = None,
    runner: Any = None,
    ranks: Any = None,
    storage: Any = None,
) -> Engine:
    host = MHAHostPool(host_tokens, cfg.page_size, dtype=dtype, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    dev = DevicePool(dev_tokens, cfg.page_size, dtype=dtype, device="cpu", **GEOM)
    if storage is None and store is not None:
        storage = make_storage(store)
    if storage is not None:
        storage.register_mem_pool_host(host)
    state = CacheState(
        cfg, host, dev, storage, clock=clock or VirtualClock(), runner=runner or StepRunner(), ranks=ranks
    )
    return Engine(state)
