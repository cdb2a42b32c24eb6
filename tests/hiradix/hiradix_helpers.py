"""Builders shared by the read-path tests: a small MHA geometry over the memory backend."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import torch

from hicache_sdk import HiCacheStorageConfig, MemoryStorage
from hicache_sdk.hiradix import (
    CacheState,
    DevicePool,
    Engine,
    ReadPathConfig,
    Sidecar,
    StepRunner,
    VirtualClock,
)
from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, SWAHostPool
from hicache_sdk.memory import MemoryTransport
from hicache_sdk.spec import PoolHitPolicy

_stores = itertools.count()
GEOM = {"layer_num": 2, "head_num": 1, "head_dim": 4}


def new_store() -> str:
    return f"readpath-{next(_stores)}"


def make_storage(store: str, model: str = "m", rank: int = 0) -> Any:
    # Generous backend deadlines: these tests are about the read path, not about the
    # backend's 0.2 s existence deadline (which a loaded 2-core CI machine can miss,
    # turning a hit into a spurious miss).
    extra = {"store": store, "exists_timeout_s": 10.0, "transfer_timeout_s": 10.0}
    s = MemoryStorage(HiCacheStorageConfig(model_name=model, tp_rank=rank, extra_config=extra), {})
    return s


SWA_WINDOW = 2


def make_sidecars(
    kinds: tuple[str, ...], page_size: int, host_tokens: int, side_tokens: int = 0
) -> list[Sidecar]:
    """``"mamba"`` (TRAILING, N=1, one state per page), ``"swa"`` (TRAILING, N=2 pages),
    ``"indexer"`` (ALL_PAGES, KV-derived). ``side_tokens``: trailing pools' slot budget."""
    out: list[Sidecar] = []
    n = side_tokens or host_tokens
    for k in kinds:
        if k == "mamba":
            pool: Any = MambaHostPool(
                max(1, n // page_size), (2, 3), [(4,)], layer_num=2, dtype=torch.float32, pin_memory=False
            )
            out.append(Sidecar("mamba", pool, PoolHitPolicy.TRAILING_PAGES, 1))
        elif k == "swa":
            pool = SWAHostPool(n, page_size, dtype=torch.float32, pin_memory=False, **GEOM)  # type: ignore[arg-type]
            out.append(Sidecar("swa", pool, PoolHitPolicy.TRAILING_PAGES, SWA_WINDOW))
        elif k == "indexer":
            pool = IndexerHostPool(host_tokens, page_size, layer_num=2, index_dim=4, pin_memory=False)
            out.append(Sidecar("indexer", pool, PoolHitPolicy.ALL_PAGES, kv_derived=True))
        else:
            raise ValueError(k)
    return out


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
    sidecars: tuple[str, ...] = (),
    side_tokens: int = 0,
) -> Engine:
    host = MHAHostPool(host_tokens, cfg.page_size, dtype=dtype, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    dev = DevicePool(dev_tokens, cfg.page_size, dtype=dtype, device="cpu", **GEOM)
    side = make_sidecars(sidecars, cfg.page_size, host_tokens, side_tokens)
    if storage is None and store is not None:
        storage = make_storage(store)
    if storage is not None:
        storage.register_mem_pool_host(host)
        for sc in side:
            storage.register_mem_host_pool_v2(sc.pool, sc.name)
    state = CacheState(
        cfg,
        host,
        dev,
        storage,
        clock=clock or VirtualClock(),
        runner=runner or StepRunner(),
        ranks=ranks,
        sidecars=side,
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
        self.fail_side_get = 0  # next batch_get_v2 of trailing pools: all False
        self.stall_calls = 0  # the next calls sleep stall_s first (past io_timeout_s: abandoned)
        self.stall_get_calls = 0  # the same, counting only reads
        self.stall_every = 0  # when > 0: every stall_every-th read stalls
        self._reads = 0
        self.stall_s = 0.0
        self._stall_lock = threading.Lock()

    def _stall(self, read: bool = False) -> None:
        with self._stall_lock:
            if read:
                self._reads += 1
            if read and self.stall_every and self._reads % self.stall_every == 0:
                pass
            elif read and self.stall_get_calls:
                self.stall_get_calls -= 1
            elif self.stall_calls:
                self.stall_calls -= 1
            else:
                return
        time.sleep(self.stall_s)
        self.short_derived_get: int | None = None  # KV-derived batch_get_v2: only this many pages

    def register_mem_pool_host(self, pool: Any) -> None:
        self.inner.register_mem_pool_host(pool)

    def register_mem_host_pool_v2(self, pool: Any, name: Any) -> None:
        self.inner.register_mem_host_pool_v2(pool, name)

    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        if self.fail_exists:
            self.fail_exists -= 1
            raise OSError("injected exists failure")
        return self.inner.batch_exists_v2(keys, pool_transfers)

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        self._stall(read=True)
        res = {k: list(v) for k, v in self.inner.batch_get_v2(transfers).items()}
        derived = any(t.indices_from_pool is not None for t in transfers)
        if derived and self.short_derived_get is not None:
            res = {k: [i < self.short_derived_get and r for i, r in enumerate(v)] for k, v in res.items()}
        if not derived and self.fail_side_get:
            self.fail_side_get -= 1
            res = {k: [False] * len(v) for k, v in res.items()}
        return res

    def batch_set_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        return dict(self.inner.batch_set_v2(transfers))

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        self._stall()
        if self.fail_exists:
            self.fail_exists -= 1
            raise OSError("injected exists failure")
        return int(self.inner.batch_exists(keys))

    def batch_get_v1(self, keys: list[str], idx: torch.Tensor, extra_info: Any = None) -> list[bool]:
        self._stall(read=True)
        if self.fail_get:
            self.fail_get -= 1
            raise OSError("injected get failure")
        res = list(self.inner.batch_get_v1(keys, idx))
        if self.short_get and len(res) > 1:
            self.short_get -= 1
            res = res[:1] + [False] * (len(res) - 1)
        return res

    def batch_set_v1(self, keys: list[str], idx: torch.Tensor, extra_info: Any = None) -> list[bool]:
        self._stall()
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


def warm(cfg: ReadPathConfig, store: str, tokens: list[int], sidecars: tuple[str, ...] = ()) -> None:
    """Serve ``tokens`` once through a fresh engine and flush its backups into ``store``."""
    e = make_engine(cfg, store, sidecars=sidecars)
    e.submit("warm", tokens)
    settle(e, "warm")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()


class StaleTransport(MemoryTransport):
    """The memory transport with *stale* objects (sgl-project/sglang#31315): ``exists``
    reports them present, and a read that touches one waits ``stall_s`` (or until
    ``release`` is set) and fails for it. ``stale_reads`` records each such read's start
    time (``time.monotonic``)."""

    def __init__(self, store: str = "default", capacity_bytes: int = 0) -> None:
        super().__init__(store, capacity_bytes)
        self.stale: set[str] = set()
        self.stall_s = 5.0
        self.release = threading.Event()
        self.stale_reads: list[float] = []
        self._rlock = threading.Lock()

    def read(self, keys: Any, buffers: Any) -> list[bool]:
        hit = [k in self.stale for k in keys]
        if any(hit):
            with self._rlock:
                self.stale_reads.append(time.monotonic())
            self.release.wait(self.stall_s)
        res = super().read(keys, buffers)
        return [ok and not bad for ok, bad in zip(res, hit)]

    def make_stale(self, page_hash: str) -> str:
        """Mark the one object of ``page_hash`` stale; its name."""
        names = [n for n in list(self._store.objects) if page_hash in n]
        assert len(names) == 1, names
        self.stale.add(names[0])
        return names[0]


class StaleStorage(MemoryStorage):
    """The ``memory`` backend over a :class:`StaleTransport` (``storage.raw_transport``)."""

    def create_transport(self, config: Any) -> Any:
        return StaleTransport(store=config.store, capacity_bytes=config.capacity_bytes)


def make_stale_storage(store: str, **extra: Any) -> StaleStorage:
    cfg = {"store": store, "exists_timeout_s": 10.0, "transfer_timeout_s": 10.0, **extra}
    return StaleStorage(HiCacheStorageConfig(model_name="m", extra_config=cfg), {})
