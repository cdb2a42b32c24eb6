"""Shared read-path state: the tree, the host and device pools, the backend, settings,
counters and rank group, plus host/device allocation with eviction.

All tree and pool bookkeeping happens on the scheduler thread (the caller's); background
jobs only move bytes and post results to queues, except the slot release of a quarantined
read (see :mod:`hicache_sdk.readpath.prefetch`), which goes through the pool's own lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from .clock import Clock, MonotonicClock
from .counters import Counters
from .devpool import DevicePool
from .ranks import LocalGroup, RankGroup
from .runner import Runner, ThreadRunner
from .tree import RadixTree, TreeNode

POLICIES = ("best_effort", "wait_complete", "timeout")
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
CHUNK_PAGES = 128


@dataclass(frozen=True)
class ReadPathConfig:
    """Knobs, with 0.5.23's defaults. ``prefetch_threshold`` is effective as at least one page."""

    page_size: int = 16
    prefetch_threshold: int = 256
    load_back_threshold: int = 10
    prefetch_policy: str = "timeout"
    write_policy: str = "write_through"
    prefetch_timeout_base: float = 1.0
    prefetch_timeout_per_ki_token: float = 0.25
    storage_enabled: bool = True

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.prefetch_policy not in POLICIES:
            raise ValueError(f"prefetch_policy must be one of {POLICIES}, got {self.prefetch_policy!r}")
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {WRITE_POLICIES}, got {self.write_policy!r}")
        for name in ("prefetch_threshold", "load_back_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def effective_prefetch_threshold(self) -> int:
        return max(self.prefetch_threshold, self.page_size)

    @property
    def write_through_threshold(self) -> int:
        return 2 if self.write_policy == "write_through_selective" else 1

    def timeout_for(self, requested_tokens: int) -> float:
        """0.5.23: base + per_ki x requested/1024, no cap."""
        return self.prefetch_timeout_base + self.prefetch_timeout_per_ki_token * requested_tokens / 1024


class CacheState:
    def __init__(
        self,
        config: ReadPathConfig,
        host_pool: Any,
        device_pool: DevicePool,
        storage: Any | None,
        *,
        namespace: str | None = None,
        clock: Clock | None = None,
        runner: Runner | None = None,
        ranks: RankGroup | None = None,
        writer_rank: int = 0,
    ) -> None:
        if host_pool.page_size != config.page_size or device_pool.page_size != config.page_size:
            raise ValueError("host pool, device pool and config must share one page_size")
        self.config = config
        self.host = host_pool
        self.dev = device_pool
        self.storage = storage
        self.tree = RadixTree(config.page_size, namespace)
        self.clock = clock or MonotonicClock()
        self.runner = runner or ThreadRunner()
        self.ranks = ranks or LocalGroup()
        self.writer_rank = writer_rank
        self.counters = Counters()
        self.host_lock = threading.Lock()  # guards host alloc/free against quarantine releases
        self.on_device_evict: list[Any] = []  # write_back hooks: f(node) before a device eviction

    @property
    def host_kv(self) -> torch.Tensor:
        return self.host.kv_buffer  # type: ignore[no-any-return]

    # -- host ---------------------------------------------------------------------------------

    def free_host(self, idx: torch.Tensor) -> None:
        if len(idx):
            with self.host_lock:
                self.host.free(idx)

    def alloc_host(self, n: int) -> torch.Tensor | None:
        with self.host_lock:
            return self.host.alloc(n)  # type: ignore[no-any-return]

    def evict_host(self, n: int) -> int:
        """Free at least ``n`` host slots from unlocked host-only leaves (LRU); the slots freed."""
        freed = 0
        while freed < n:
            cands = self.tree.evictable_host()
            if not cands:
                break
            node = cands[0]
            assert node.host_value is not None
            self.free_host(node.host_value)
            freed += len(node.host_value)
            node.host_value = None
            self.tree.prune(node)
        return freed

    def alloc_host_evicting(self, n: int, min_tokens: int | None = None) -> torch.Tensor | None:
        """``n`` slots, evicting when short; with ``min_tokens``, the largest page-aligned part
        of ``n`` that is at least ``min_tokens``; ``None`` when even that fails."""
        idx = self.alloc_host(n)
        if idx is None:
            self.evict_host(n - self.host.available_size())
            idx = self.alloc_host(n)
        if idx is None and min_tokens is not None:
            ps = self.config.page_size
            part = min(n, self.host.available_size() // ps * ps)
            if part >= max(min_tokens, ps):
                idx = self.alloc_host(part)
        return idx

    # -- device -------------------------------------------------------------------------------

    def evict_device(self, n: int) -> int:
        """Free at least ``n`` device slots from unlocked device leaves (LRU)."""
        freed = 0
        while freed < n:
            cands = self.tree.evictable_device()
            if not cands:
                break
            node = cands[0]
            for hook in self.on_device_evict:
                hook(node)
            assert node.value is not None
            self.dev.free(node.value)
            freed += len(node.value)
            node.value = None
            self.tree.prune(node)
        return freed

    def alloc_device_evicting(self, n: int) -> torch.Tensor | None:
        idx = self.dev.alloc(n)
        if idx is None:
            self.evict_device(n - self.dev.available_size())
            idx = self.dev.alloc(n)
        return idx

    def close(self) -> None:
        self.runner.close()


def node_pages(nodes: list[TreeNode]) -> int:
    return len(nodes)
