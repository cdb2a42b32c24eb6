"""A small, correct, full-contract backend (no paged adapter): the baseline the
semantic broken backends each break in exactly one way.

Pages live in a process-wide dict keyed by ``(namespace, identity, pool, key)``, where
the identity carries model, parallel rank and the pool's byte layout exactly as the
default key scheme must (MLA pages are shared by every TP rank; DP replicas share).
Only the ``default`` key scheme is supported. It is a test double: not fast, not
bounded, not shared across processes.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar, List, Optional

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.spec import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolTransfer,
    PoolTransferResult,
    pool_name_str,
)

__all__ = ["ReferenceStorage"]

_STORE: dict[tuple[str, str, str, str], bytes] = {}
_LOCK = threading.Lock()


def _tensor_bytes(t: Any) -> bytes:
    import torch

    flat = t.detach().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def _write_flat(pool: Any, index: int, data: bytes) -> None:
    import torch

    dummy = pool.get_dummy_flat_data_page()
    src = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dummy.dtype)
    pool.set_from_flat_data_page(index, src)


class ReferenceStorage(HiCacheStorage):
    """Correct full-contract dict backend. ``extra_config``: ``namespace`` (required
    by the suite), ``key_scheme`` (only ``"default"``)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        zero_copy=True, hybrid_pools=True, mla=True, persistent=True, delete=True
    )

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        self.storage_config = storage_config
        extra = dict(storage_config.extra_config or {})
        scheme = extra.get("key_scheme", "default")
        if scheme != "default":
            raise ValueError(f"key_scheme: only 'default' is supported, got {scheme!r}")
        self.namespace = str(extra.get("namespace", ""))
        self.registered_pools: dict[Any, Any] = {}
        self.mem_pool_host: Any = None

    # -- identity ------------------------------------------------------------------------
    def _identity(self, pool: Any) -> str:
        sc = self.storage_config
        geometry = (
            type(pool).__name__,
            pool.layout,
            str(pool.dtype),
            pool.page_size,
            pool.get_dummy_flat_data_page().numel(),
        )
        model = sc.model_name or ""
        if sc.is_mla_model:
            ranks = f"pp{sc.pp_rank}/{sc.pp_size}"
        else:
            ranks = f"tp{sc.tp_rank}/{sc.tp_size}-pp{sc.pp_rank}/{sc.pp_size}-cp{sc.attn_cp_rank}/{sc.attn_cp_size}"
        return f"{model}|{ranks}|{geometry}"

    def _slot(self, pool_name: str, key: str, pool: Any) -> tuple[str, str, str, str]:
        return (self.namespace, self._identity(pool), pool_name, key)

    def _pool(self, name: Any) -> Any:
        if name == "kv" or pool_name_str(name) == "kv":
            if self.mem_pool_host is None:
                raise RuntimeError("register_mem_pool_host was not called")
            return self.mem_pool_host
        return self.registered_pools[pool_name_str(name)]

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        self.registered_pools[pool_name_str(host_pool_name)] = host_pool

    # -- primitives ------------------------------------------------------------------------
    def _has(self, pool_name: str, key: str) -> bool:
        with _LOCK:
            return self._slot(pool_name, key, self._pool(pool_name)) in _STORE

    def _put(self, pool_name: str, key: str, data: bytes) -> bool:
        slot = self._slot(pool_name, key, self._pool(pool_name))
        with _LOCK:
            _STORE.setdefault(slot, data)
        return True

    def _get(self, pool_name: str, key: str) -> Optional[bytes]:
        with _LOCK:
            return _STORE.get(self._slot(pool_name, key, self._pool(pool_name)))

    # -- legacy ----------------------------------------------------------------------------
    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> Any:
        data = self._get("kv", key)
        if data is None:
            return None
        target = (
            target_location if target_location is not None else self.mem_pool_host.get_dummy_flat_data_page()
        )
        import torch

        target.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return target

    def batch_get(
        self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None
    ) -> Any:
        locs = target_locations if target_locations is not None else [None] * len(keys)
        return [self.get(k, t) for k, t in zip(keys, locs)]

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if value is None:
            raise ValueError("value: a flat page tensor is required")
        return self._put("kv", key, _tensor_bytes(value))

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if values is None or len(values) != len(keys):
            raise ValueError("values: one flat page tensor per key is required")
        return all([self.set(k, v) for k, v in zip(keys, values)])

    def exists(self, key: str) -> bool:
        return self._has("kv", key)

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    # -- v1 --------------------------------------------------------------------------------
    def _check_indices(self, keys: List[str], host_indices: Any, pool: Any) -> None:
        if len(host_indices) != len(keys) * pool.page_size:
            raise ValueError("host_indices: length must be len(keys) * page_size")

    def _get_pages(self, name: str, keys: List[str], host_indices: Any) -> List[bool]:
        pool = self._pool(name)
        self._check_indices(keys, host_indices, pool)
        out = []
        for i, k in enumerate(keys):
            data = self._get(name, k)
            if data is not None:
                _write_flat(pool, int(host_indices[i * pool.page_size]), data)
            out.append(data is not None)
        return out

    def _set_pages(self, name: str, keys: List[str], host_indices: Any) -> List[bool]:
        pool = self._pool(name)
        self._check_indices(keys, host_indices, pool)
        return [
            self._put(
                name, k, _tensor_bytes(pool.get_data_page(int(host_indices[i * pool.page_size]), flat=True))
            )
            for i, k in enumerate(keys)
        ]

    def batch_get_v1(
        self, keys: List[str], host_indices: Any, extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> List[bool]:
        return self._get_pages("kv", keys, host_indices)

    def batch_set_v1(
        self, keys: List[str], host_indices: Any, extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> List[bool]:
        return self._set_pages("kv", keys, host_indices)

    # -- v2 --------------------------------------------------------------------------------
    def batch_get_v2(
        self, transfers: List[PoolTransfer], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> dict[str, List[bool]]:
        return {
            pool_name_str(t.name): self._get_pages(pool_name_str(t.name), t.keys or [], t.host_indices)
            for t in transfers
        }

    def batch_set_v2(
        self, transfers: List[PoolTransfer], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> dict[str, List[bool]]:
        return {
            pool_name_str(t.name): self._set_pages(pool_name_str(t.name), t.keys or [], t.host_indices)
            for t in transfers
        }

    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        kv = self.batch_exists(keys)
        if kv == 0:
            return PoolTransferResult(0, {}, [])
        endpoints = set(range(1, kv + 1))
        extra: dict[str, int] = {"kv": kv}
        for t in pool_transfers or []:
            if not endpoints:
                break
            name = pool_name_str(t.name)
            has = [self._has(name, keys[i]) for i in range(kv)]
            if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                b = has.index(False) if False in has else kv
                ends = set(range(1, b + 1))
            elif t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                n = max(1, len(t.keys or []))
                ends = {p for p in range(1, kv + 1) if all(has[max(0, p - n) : p])}
                b = max(ends, default=0)
            else:
                raise ValueError(f"pool_transfers: unsupported hit_policy {t.hit_policy!r}")
            endpoints &= ends
            if b > 0:
                extra[name] = b
        return PoolTransferResult(max(endpoints, default=0), extra, sorted(endpoints))

    # -- admin -----------------------------------------------------------------------------
    def clear(self) -> None:
        with _LOCK:
            for slot in [s for s in _STORE if s[0] == self.namespace]:
                del _STORE[slot]

    def close(self) -> None:
        pass
