"""The reference read and write path: radix tree, device pool, ``prefetch_from_storage``,
``load_back``, the write policies, rank consensus and ``explain`` (docs/read-path.md)."""

from __future__ import annotations

from .backup import WritePath
from .cache import CHUNK_PAGES, CacheState, CallAbandoned, ReadPathConfig
from .clock import MonotonicClock, VirtualClock
from .counters import Abort, Counters, explain
from .devpool import CopyFailed, DevicePool
from .engine import Engine, Served, page_kv
from .loadback import load_back
from .prefetch import Prefetcher, PrefetchOp
from .ranks import GlooGroup, LocalGroup, agreed_endpoint, restorable_flags
from .retry import Retries
from .runner import StepRunner, ThreadRunner
from .sidecars import Sidecar, side_page
from .tree import MatchResult, RadixTree, TreeNode

__all__ = [
    "CHUNK_PAGES",
    "Abort",
    "CacheState",
    "CallAbandoned",
    "CopyFailed",
    "Counters",
    "DevicePool",
    "Engine",
    "GlooGroup",
    "LocalGroup",
    "MatchResult",
    "MonotonicClock",
    "PrefetchOp",
    "Prefetcher",
    "RadixTree",
    "ReadPathConfig",
    "Retries",
    "Served",
    "Sidecar",
    "StepRunner",
    "ThreadRunner",
    "TreeNode",
    "VirtualClock",
    "WritePath",
    "agreed_endpoint",
    "explain",
    "load_back",
    "page_kv",
    "restorable_flags",
    "side_page",
]
