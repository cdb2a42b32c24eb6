"""hicache-sdk: the toolkit for the external (L3) storage tier of LLM KV caches.

The public API is re-exported here. The contract types (``hicache_sdk.spec``) and the key
hashing functions load eagerly and never import torch; everything that touches tensors
(host pools, the paged adapter, backends) loads on first attribute access, so
``import hicache_sdk`` stays cheap (the CLI's ``hicache backends`` relies on it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .capabilities import Capabilities
from .config import BackendConfig, parse_config_arg, secret_field, setting
from .errors import (
    BackendNotFoundError,
    BackendUnavailableError,
    Cancelled,
    ClearRefusedError,
    ConfigError,
    DuplicateBackendError,
    HiCacheError,
    NotRegisteredError,
)
from .keys.hashing import get_hash_str, get_storage_hash_str, hash_str_to_int64, storage_namespace_seed
from .spec import (
    STORAGE_BATCH_SIZE,
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
    SidecarPoolSpec,
    StorageMetrics,
    count_pool_hits,
    pool_name_str,
)
from .transport import SIZE_UNKNOWN, Segment, Segments, Transport, TransportError

__version__ = "0.2.0"

# name -> module that defines it; imported on first access.
_LAZY: dict[str, str] = {
    "PagedStorage": "hicache_sdk.paged",
    "MemoryStorage": "hicache_sdk.memory",
    "MemoryTransport": "hicache_sdk.memory",
    "MemoryConfig": "hicache_sdk.memory",
    "MHAHostPool": "hicache_sdk.hostpool",
    "MLAHostPool": "hicache_sdk.hostpool",
    "MambaHostPool": "hicache_sdk.hostpool",
    "SWAHostPool": "hicache_sdk.hostpool",
    "IndexerHostPool": "hicache_sdk.hostpool",
    "PoolLayout": "hicache_sdk.hostpool.layout",
    "describe_pool": "hicache_sdk.hostpool",
    "make_scheme": "hicache_sdk.keys.schemes",
    "KeyScheme": "hicache_sdk.keys.scheme_base",
    "ObjectSpec": "hicache_sdk.keys.scheme_base",
    "BackendInfo": "hicache_sdk.registry",
    "create_backend": "hicache_sdk.registry",
    "list_backends": "hicache_sdk.registry",
    "register_backend": "hicache_sdk.registry",
    "resolve_backend": "hicache_sdk.registry",
    "Metrics": "hicache_sdk.metrics.backend",
    "FailureInjector": "hicache_sdk.resilience",
    "wrap_transport": "hicache_sdk.resilience",
    # the transport kit (docs/transport-kit.md)
    "CachedExistence": "hicache_sdk.kit.existence",
    "CancelToken": "hicache_sdk.kit.cancel",
    "FailureReasons": "hicache_sdk.transport",
    "FanOut": "hicache_sdk.kit.fanout",
}

__all__ = [
    "SIZE_UNKNOWN",
    "STORAGE_BATCH_SIZE",
    "BackendConfig",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "Cancelled",
    "Capabilities",
    "ClearRefusedError",
    "ConfigError",
    "DuplicateBackendError",
    "HiCacheError",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "NotRegisteredError",
    "PoolHitPolicy",
    "PoolName",
    "PoolTransfer",
    "PoolTransferResult",
    "Segment",
    "Segments",
    "SidecarPoolSpec",
    "StorageMetrics",
    "Transport",
    "TransportError",
    "__version__",
    "count_pool_hits",
    "get_hash_str",
    "get_storage_hash_str",
    "hash_str_to_int64",
    "parse_config_arg",
    "pool_name_str",
    "secret_field",
    "setting",
    "storage_namespace_seed",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hicache_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .hostpool import (
        IndexerHostPool as IndexerHostPool,
    )
    from .hostpool import (
        MambaHostPool as MambaHostPool,
    )
    from .hostpool import (
        MHAHostPool as MHAHostPool,
    )
    from .hostpool import (
        MLAHostPool as MLAHostPool,
    )
    from .hostpool import (
        SWAHostPool as SWAHostPool,
    )
    from .hostpool import (
        describe_pool as describe_pool,
    )
    from .hostpool.layout import PoolLayout as PoolLayout
    from .keys.scheme_base import KeyScheme as KeyScheme
    from .keys.scheme_base import ObjectSpec as ObjectSpec
    from .keys.schemes import make_scheme as make_scheme
    from .kit.cancel import CancelToken as CancelToken
    from .kit.existence import CachedExistence as CachedExistence
    from .kit.fanout import FanOut as FanOut
    from .memory import (
        MemoryConfig as MemoryConfig,
    )
    from .memory import (
        MemoryStorage as MemoryStorage,
    )
    from .memory import (
        MemoryTransport as MemoryTransport,
    )
    from .metrics.backend import Metrics as Metrics
    from .paged import PagedStorage as PagedStorage
    from .registry import (
        BackendInfo as BackendInfo,
    )
    from .registry import (
        create_backend as create_backend,
    )
    from .registry import (
        list_backends as list_backends,
    )
    from .registry import (
        register_backend as register_backend,
    )
    from .registry import (
        resolve_backend as resolve_backend,
    )
    from .resilience import FailureInjector as FailureInjector
    from .resilience import wrap_transport as wrap_transport
    from .transport import FailureReasons as FailureReasons
