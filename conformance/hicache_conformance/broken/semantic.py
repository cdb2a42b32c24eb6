"""Full-contract backends, each broken in exactly one semantic way.

They are full-contract on purpose: the paged adapter would hide these faults. Each
class names the suite test that must fail for it in ``FAILS``; ``PATHS`` the SGLang I/O
paths it is broken on (``()``: the test is not path-specific); ``PROFILES`` the profiles
whose rules it breaks (a strict-only rule is skipped under ``contract``).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, List, Optional

from hicache_sdk.spec import HiCacheStorageExtraInfo, PoolTransfer, PoolTransferResult, pool_name_str

from .reference import _LOCK, _STORE, ReferenceStorage, _write_flat

__all__ = [
    "ExistsCountsNonConsecutive",
    "GetReturnsOtherPage",
    "SetRewritesExisting",
    "MissingPageRaises",
    "SidecarRunIgnored",
    "WriteVisibleBeforeItsBytes",
]


class ExistsCountsNonConsecutive(ReferenceStorage):
    """``batch_exists`` counts every present key, not the leading run."""

    FAILS: ClassVar[str] = "test_batch_exists_counts_leading_run_only"
    PATHS: ClassVar[tuple[str, ...]] = ()

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return sum(1 for k in keys if self.exists(k))


class GetReturnsOtherPage(ReferenceStorage):
    """Reads of a batch return the bytes of the *next* key's page when it exists (on the
    v1 and v2 paths; the generic ``batch_get`` is right)."""

    FAILS: ClassVar[str] = "test_get_returns_each_pages_own_bytes"
    PATHS: ClassVar[tuple[str, ...]] = ("v1",)

    def _get_pages(self, name: str, keys: List[str], host_indices: Any) -> List[bool]:
        pool = self._pool(name)
        self._check_indices(keys, host_indices, pool)
        out = []
        for i, k in enumerate(keys):
            data = self._get(name, k)
            if data is not None and i + 1 < len(keys):
                data = self._get(name, keys[i + 1]) or data
            if data is not None:
                _write_flat(pool, int(host_indices[i * pool.page_size]), data)
            out.append(data is not None)
        return out


class SetRewritesExisting(ReferenceStorage):
    """A write of an existing page replaces its bytes (last writer wins): correct by
    SGLang's contract (it relies only on the rewrite returning True), wrong by the
    ``strict`` first-write-wins rule."""

    FAILS: ClassVar[str] = "test_set_existing_page_keeps_original"
    PATHS: ClassVar[tuple[str, ...]] = ()
    PROFILES: ClassVar[tuple[str, ...]] = ("strict",)

    def _put(self, pool_name: str, key: str, data: bytes) -> bool:
        slot = self._slot(pool_name, key, self._pool(pool_name))
        with _LOCK:
            _STORE[slot] = data
        return True


class MissingPageRaises(ReferenceStorage):
    """A read of a missing page raises ``KeyError`` instead of reporting a miss."""

    FAILS: ClassVar[str] = "test_missing_page_is_a_miss"
    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def _get(self, pool_name: str, key: str) -> Optional[bytes]:
        with _LOCK:
            return _STORE[self._slot(pool_name, key, self._pool(pool_name))]


class SidecarRunIgnored(ReferenceStorage):
    """v2 hits ignore the sidecar pools: ``batch_exists_v2`` reports the KV run alone, and
    ``batch_get_v2`` reports a hit for a sidecar page it does not hold (leaving the host
    page as it was). The fault behind garbled output when a sidecar run was shorter than
    the KV run (https://github.com/sgl-project/sglang/issues/31108) or an indexer was never
    persisted (https://github.com/kvcache-ai/Mooncake/issues/2236)."""

    FAILS: ClassVar[str] = "test_v2_sidecar_run_shorter_than_kv_commits_the_minimum"
    PATHS: ClassVar[tuple[str, ...]] = ()

    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        kv = self.batch_exists(keys)
        return PoolTransferResult(kv, {"kv": kv} if kv else {}, list(range(1, kv + 1)))

    def batch_get_v2(
        self, transfers: List[PoolTransfer], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> dict[str, List[bool]]:
        out = super().batch_get_v2(transfers, extra_info)
        return {name: [True] * len(hits) for name, hits in out.items() if pool_name_str(name) != "kv"}


class WriteVisibleBeforeItsBytes(ReferenceStorage):
    """Every write publishes the page first, zero-filled, and its bytes a moment later
    (an object store that creates the key before the upload lands, a file written in
    place): a read that runs while a backup writes the same page gets a torn page.
    Sequential tests cannot see it; SGLang's own threads do."""

    FAILS: ClassVar[str] = "test_sglang_threads_no_torn_page_no_lost_write"
    PATHS: ClassVar[tuple[str, ...]] = ()

    def _put(self, pool_name: str, key: str, data: bytes) -> bool:
        slot = self._slot(pool_name, key, self._pool(pool_name))
        with _LOCK:
            _STORE[slot] = bytes(len(data))
        time.sleep(0.002)
        with _LOCK:
            _STORE[slot] = data
        return True
