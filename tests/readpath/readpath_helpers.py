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


class Flaky:
    """A real backend with scheduled failures: ``fail_exists`` / ``fail_get`` / ``fail_set``
    count down calls that raise; ``short_get`` makes the next read report only its first page."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fail_exists = 0
        self.fail_get = 0
        self.fail_set = 0
        self.short_get = 0

    def register_mem_pool_host(self, pool: Any) -> None:
        self.inner.register_mem_pool_host(pool)

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        if self.fail_exists:
            self.fail_exists -= 1
            raise OSError("injected exists failure")
        return int(self.inner.batch_exists(keys))

    def batch_get_v1(self, keys: list[str], idx: torch.Tensor, extra_info: Any = None) -> list[bool]:
        if self.fail_get:
            self.fail_get -= 1
            raise OSError("injected get failure")
        res = list(self.inner.batch_get_v1(keys, idx))
        if self.short_get and len(res) > 1:
            self.short_get -= 1
            res = res[:1] + [False] * (len(res) - 1)
        return res

    def batch_set_v1(self, keys: list[str], idx: torch.Tensor, extra_info: Any = None) -> list[bool]:
        if self.fail_set:
            self.fail_set -= 1
            raise OSError("injected set failure")
        return list(self.inner.batch_set_v1(keys, idx))


def settle(e: Engine, req: str, max_rounds: int = 50) -> Any:
    """Alternate runner steps and admission polls until ``req`` is admitted (StepRunner, virtual clock)."""
    for _ in range(max_rounds):
        r = e.try_admit(req)
        if r is not None:
            return r
        e.s.runner.run_all()  # type: ignore[attr-defined]
    raise AssertionError(f"{req} not admitted after {max_rounds} rounds")


def warm(cfg: ReadPathConfig, store: str, tokens: list[int]) -> None:
    """Serve ``tokens`` once through a fresh engine and flush its backups into ``store``."""
    e = make_engine(cfg, store)
    e.submit("warm", tokens)
    settle(e, "warm")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
