"""Host (L2) KV pools and the page-geometry bridge to the paged adapter.

Pools are CPU tensors laid out exactly as SGLang 0.5.23's host pools; the bridge
(:func:`describe_pool`, :func:`page_starts`, :func:`page_segments`) works on ours and on
SGLang's own pool objects by duck typing. Everything that needs torch loads on first
attribute access, so importing :class:`PoolLayout` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hicache_sdk.hostpool.layout import PoolLayout

_LAZY = {
    "HostPoolBase": "hicache_sdk.hostpool.base",
    "describe_pool": "hicache_sdk.hostpool.describe",
    "flat_page_view": "hicache_sdk.hostpool.describe",
    "has_page_segments": "hicache_sdk.hostpool.describe",
    "page_segments": "hicache_sdk.hostpool.describe",
    "page_starts": "hicache_sdk.hostpool.describe",
    "MHAHostPool": "hicache_sdk.hostpool.mha",
    "MLAHostPool": "hicache_sdk.hostpool.mla",
    "IndexerHostPool": "hicache_sdk.hostpool.sidecar",
    "MambaHostPool": "hicache_sdk.hostpool.sidecar",
    "SWAHostPool": "hicache_sdk.hostpool.sidecar",
}

__all__ = ["PoolLayout", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hicache_sdk.hostpool' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from hicache_sdk.hostpool.base import HostPoolBase as HostPoolBase
    from hicache_sdk.hostpool.describe import (
        describe_pool as describe_pool,
    )
    from hicache_sdk.hostpool.describe import (
        flat_page_view as flat_page_view,
    )
    from hicache_sdk.hostpool.describe import (
        has_page_segments as has_page_segments,
    )
    from hicache_sdk.hostpool.describe import (
        page_segments as page_segments,
    )
    from hicache_sdk.hostpool.describe import (
        page_starts as page_starts,
    )
    from hicache_sdk.hostpool.mha import MHAHostPool as MHAHostPool
    from hicache_sdk.hostpool.mla import MLAHostPool as MLAHostPool
    from hicache_sdk.hostpool.sidecar import (
        IndexerHostPool as IndexerHostPool,
    )
    from hicache_sdk.hostpool.sidecar import (
        MambaHostPool as MambaHostPool,
    )
    from hicache_sdk.hostpool.sidecar import (
        SWAHostPool as SWAHostPool,
    )
