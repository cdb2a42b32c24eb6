"""Host (L2) KV pools and the page-geometry bridge to the paged adapter.

Pools are CPU tensors laid out exactly as SGLang 0.5.23's host pools; the bridge
(:func:`describe_pool`, :func:`page_starts`, :func:`page_segments`) works on ours and on
SGLang's own pool objects by duck typing.
"""

from __future__ import annotations

from hicache_sdk.hostpool.base import HostPoolBase
from hicache_sdk.hostpool.describe import (
    describe_pool,
    flat_page_view,
    has_page_segments,
    page_segments,
    page_starts,
)
from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.hostpool.mla import MLAHostPool
from hicache_sdk.hostpool.sidecar import IndexerHostPool, MambaHostPool, SWAHostPool

__all__ = [
    "HostPoolBase",
    "IndexerHostPool",
    "MHAHostPool",
    "MLAHostPool",
    "MambaHostPool",
    "PoolLayout",
    "SWAHostPool",
    "describe_pool",
    "flat_page_view",
    "has_page_segments",
    "page_segments",
    "page_starts",
]
