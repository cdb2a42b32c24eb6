"""Full-contract backends, each broken in exactly one semantic way.

They are full-contract on purpose: the paged adapter would hide these faults. Each
class names the suite test that must fail for it in ``FAILS``.
"""

from __future__ import annotations

from typing import Any, ClassVar, List, Optional

from hicache_sdk.spec import HiCacheStorageExtraInfo

from .reference import _LOCK, _STORE, ReferenceStorage, _write_flat

__all__ = [
    "ExistsCountsNonConsecutive",
    "GetReturnsOtherPage",
    "SetRewritesExisting",
    "MissingPageRaises",
]


class ExistsCountsNonConsecutive(ReferenceStorage):
    """``batch_exists`` counts every present key, not the leading run."""

    FAILS: ClassVar[str] = "test_batch_exists_counts_leading_run_only"

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return sum(1 for k in keys if self.exists(k))


class GetReturnsOtherPage(ReferenceStorage):
    """Reads of a batch return the bytes of the *next* key's page when it exists."""

    FAILS: ClassVar[str] = "test_get_returns_each_pages_own_bytes"

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
    """A write of an existing page replaces its bytes (last writer wins)."""

    FAILS: ClassVar[str] = "test_set_existing_page_keeps_original"

    def _put(self, pool_name: str, key: str, data: bytes) -> bool:
        slot = self._slot(pool_name, key, self._pool(pool_name))
        with _LOCK:
            _STORE[slot] = data
        return True


class MissingPageRaises(ReferenceStorage):
    """A read of a missing page raises ``KeyError`` instead of reporting a miss."""

    FAILS: ClassVar[str] = "test_missing_page_is_a_miss"

    def _get(self, pool_name: str, key: str) -> Optional[bytes]:
        with _LOCK:
            return _STORE[self._slot(pool_name, key, self._pool(pool_name))]
