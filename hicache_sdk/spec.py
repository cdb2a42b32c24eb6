"""The ``HiCacheStorage`` contract, drop-in compatible with SGLang 0.5.23.

Names, fields, defaults, signatures and return semantics follow
``sglang.srt.mem_cache.hicache_storage`` of SGLang 0.5.23 (see :mod:`hicache_sdk.sglang.versions` for the
version-specific facts). Where SGLang is a trap we are stricter:

* ``batch_get_v1`` / ``batch_set_v1`` raise ``NotImplementedError`` when a backend does
  not implement them (SGLang's default returns ``None``, which its controller swallows as
  a ``TypeError`` and silently disables L3).
* ``close()`` exists as a no-op so that SGLang's detach path never fails.

This module never imports torch at import time; tensors appear only in type hints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, List, Optional

from .sglang.versions import CURRENT

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "STORAGE_BATCH_SIZE",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "PoolName",
    "PoolHitPolicy",
    "PoolTransfer",
    "SidecarPoolSpec",
    "PoolTransferResult",
    "count_pool_hits",
    "StorageMetrics",
    "HiCacheStorage",
    "pool_name_str",
]

#: The most pages one batched L3 transfer carries (prefetch transfer and backup).
#: Existence queries are not capped by it.
STORAGE_BATCH_SIZE = CURRENT.storage_batch_size

# SGLang's storage config lives in its own module; re-exported here, where SGLang has it.
from .config.storage import HiCacheStorageConfig  # noqa: E402


@dataclass
class HiCacheStorageExtraInfo:
    """Per-call extras.

    ``prefix_keys``: page hashes that come before this call's ``keys`` from the start of
    the sequence (``prefix_keys + keys`` is one hash chain), or ``None``. Backends must
    never mutate it. ``extra_info``: a free-form bag (Mooncake's ``session_id``).
    """

    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict[str, Any]] = None


class PoolName(str, Enum):
    """Well-known pool names (SGLang 0.5.23). An unknown pool name is accepted anywhere
    a ``PoolName`` is as a plain string (see :func:`pool_name_str`)."""

    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    AUXILIARY_SWA = "auxiliary_swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C1 = "deepseek_v4_c1"
    DEEPSEEK_V4_C1_INDEXER = "deepseek_v4_c1_indexer"
    DEEPSEEK_V4_C1_INDEXER_SCALE = "deepseek_v4_c1_indexer_scale"
    DEEPSEEK_V4_C2 = "deepseek_v4_c2"
    DEEPSEEK_V4_C2_INDEXER = "deepseek_v4_c2_indexer"
    DEEPSEEK_V4_C2_INDEXER_SCALE = "deepseek_v4_c2_indexer_scale"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C4_INDEXER_SCALE = "deepseek_v4_c4_indexer_scale"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_ROPE = "deepseek_v4_c4_rope"
    DEEPSEEK_V4_C128_ROPE = "deepseek_v4_c128_rope"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


def pool_name_str(name: Any) -> str:
    """The plain string value of a pool name: a ``PoolName`` member (ours or SGLang's),
    or any string. Raises ``ValueError`` for anything else or an empty name."""
    value = getattr(name, "value", name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"pool name must be a non-empty string or PoolName, got {name!r}")
    return value


class PoolHitPolicy(str, Enum):
    """How ``batch_exists_v2`` folds an extra pool into the KV hit.

    ALL_PAGES: every page of the KV prefix must hold the pool. TRAILING_PAGES: only the
    last ``N = max(1, len(transfer.keys))`` pages before an endpoint must. BLOCK_GROUPS:
    declared by SGLang 0.5.23 but unused; rejected with ``ValueError``.
    """

    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"
    BLOCK_GROUPS = "block_groups"


@dataclass
class PoolTransfer:
    """One per-pool transfer descriptor (device<->host and host<->storage paths).

    ``host_indices``: int64 host slots, ``len(keys) * pool.page_size`` of them; page i
    starts at ``host_indices[i * pool.page_size]``. ``indices_from_pool``: for a sidecar,
    the pool whose indices and keys it shares.
    """

    name: PoolName
    host_indices: Optional[torch.Tensor] = None
    device_indices: Optional[torch.Tensor] = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None
    block_pages: int = 0
    group_pages: int = 0


@dataclass(frozen=True)
class SidecarPoolSpec:
    """A pool whose transfer indices and keys derive from a source pool."""

    pool_name: PoolName
    indices_from_pool: PoolName
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES


@dataclass
class PoolTransferResult:
    """Outcome of ``batch_exists_v2`` (and the controller's accumulation).

    ``kv_hit_pages``: usable KV prefix in pages after folding every extra pool.
    ``extra_pool_hit_pages``: each pool's own boundary; includes ``"kv"`` when the raw KV
    prefix is > 0 and omits pools whose boundary is 0. ``restorable_prefix_pages``: the
    ascending list of prefix lengths (1-based pages) at which every pool can be restored;
    ``None`` means "not reported" (the caller assumes ``1..kv_hit_pages``).
    """

    kv_hit_pages: int
    extra_pool_hit_pages: dict[str, int]
    restorable_prefix_pages: Optional[List[int]] = None

    @classmethod
    def empty(cls) -> PoolTransferResult:
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        """Keep the maximum (SGLang accumulates across batches this way)."""
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: dict[str, int]) -> None:
        """Overwrite per-pool *counts* (0.5.23 meaning: already reduced by
        :func:`count_pool_hits`; 0.5.10 took bool lists)."""
        self.extra_pool_hit_pages.update(results)


def count_pool_hits(results: dict[str, List[bool]]) -> dict[str, int]:
    """Per pool, the number of leading ``True`` values (index of the first ``False``)."""
    return {name: (rs.index(False) if False in rs else len(rs)) for name, rs in results.items()}


@dataclass
class StorageMetrics:
    """Shape of SGLang's ``StorageMetrics``: lists drained on every ``get_stats()``."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


class HiCacheStorage(ABC):
    """A key-value store for KV-cache pages: SGLang 0.5.23's ``HiCacheStorage``.

    Thread safety: SGLang calls a backend from four controller threads at once (plus the
    scheduler thread for ``batch_exists``); implementations must be thread-safe.

    I/O failures never raise out of the ``batch_*`` methods: they return misses /
    ``False``. Programming errors (wrong shapes, lengths, unaligned indices) raise
    ``ValueError`` naming the argument, before any I/O.
    """

    # -- host pool registration (defaults as in SGLang) -------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Receive the anchor (KV) host pool, right after construction."""
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Receive one host pool of the pool group (KV included), by name."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools: dict[Any, Any] = {}
        self.registered_pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        """Fires once after the first registration burst; raising fails the attach."""

    # -- v2 (hybrid pools) ---------------------------------------------------------
    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        """Fold KV existence with each extra pool's hit policy (see ``paged.merge``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_exists_v2")

    def batch_get_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Per ``transfer.name``, a per-key success list aligned with ``transfer.keys``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_get_v2")

    def batch_set_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Write counterpart of :meth:`batch_get_v2`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_set_v2")

    # -- v1 (zero-copy) ------------------------------------------------------------
    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Read page i into host slots starting at ``host_indices[i * page_size]``.

        Requires ``len(host_indices) == len(keys) * page_size``. Returns a per-key
        success list. Stricter than SGLang: raises ``NotImplementedError`` when absent.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_get_v1")

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Write counterpart of :meth:`batch_get_v1`; an existing page counts as success
        and is not rewritten."""
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_set_v1")

    # -- legacy (generic path) -----------------------------------------------------
    @abstractmethod
    def get(
        self,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        """Return the filled tensor, or ``None`` when the key is missing."""

    @abstractmethod
    def batch_get(
        self,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None] | int:
        """A list aligned with ``keys``: the filled tensor or ``None`` per key."""

    @abstractmethod
    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """Store one page; an existing key is success and is not rewritten."""

    @abstractmethod
    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """``True`` only if every page was stored (or already present)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether one page's KV object(s) exist."""

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """The number of consecutive existing keys from the start."""
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        """Remove this backend's pages (the default does nothing)."""

    def get_stats(self) -> Any:
        """A :class:`StorageMetrics` drained on each call, or ``None``."""
        return None

    def close(self) -> None:
        """Release resources. Idempotent. The default does nothing."""
