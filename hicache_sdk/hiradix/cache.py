"""Shared read-path state: the tree, the host and device pools, the backend, settings,
counters and rank group, plus host/device allocation with eviction.

All tree and pool bookkeeping happens on the scheduler thread (the caller's); background
jobs only move bytes and post results to queues, except the slot release of a quarantined
read (see :mod:`hicache_sdk.hiradix.prefetch`), which goes through the pool's own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from hicache_sdk.resilience.deadline import DeadlineRunner
from hicache_sdk.sglang.versions import CURRENT

from .clock import Clock, MonotonicClock
from .counters import Counters
from .devpool import DevicePool
from .ranks import LocalGroup, RankGroup
from .runner import Runner, ThreadRunner
from .sidecars import Sidecar
from .tree import RadixTree, TreeNode

POLICIES = ("best_effort", "wait_complete", "timeout")
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
CHUNK_PAGES = 128
T = TypeVar("T")


#: SGLang's prefetch keys of ``extra_config`` with their defaults.
_RESERVED: dict[str, Any] = dict(CURRENT.reserved_extra_config)


@dataclass(frozen=True)
class ReadPathConfig:
    """Knobs, with 0.5.23's defaults. ``prefetch_threshold`` is effective as at least one page.

    ``prefetch_retry_poll_interval`` / ``prefetch_retry_max_attempts``: 0.5.23's
    ``--hicache-storage-prefetch-retry-*`` (8 scheduling passes, 8 attempts; 0 attempts
    disables retries). ``io_timeout_s``: when set, every backend call of the background jobs
    runs on the resilience layer's :class:`~hicache_sdk.resilience.deadline.DeadlineRunner`
    and is abandoned (a miss) after that many real seconds; host slots it may still fill
    stay quarantined until it ends. ``None`` (default): calls run inline, unbounded.
    """

    page_size: int = 16
    prefetch_threshold: int = _RESERVED["prefetch_threshold"]
    load_back_threshold: int = CURRENT.load_back_threshold
    prefetch_policy: str = "timeout"
    write_policy: str = "write_through"
    prefetch_timeout_base: float = _RESERVED["prefetch_timeout_base"]
    prefetch_timeout_per_ki_token: float = _RESERVED["prefetch_timeout_per_ki_token"]
    storage_enabled: bool = True
    prefetch_retry_poll_interval: int = CURRENT.prefetch_retry_poll_interval
    prefetch_retry_max_attempts: int = CURRENT.prefetch_retry_max_attempts
    io_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.prefetch_policy not in POLICIES:
            raise ValueError(f"prefetch_policy must be one of {POLICIES}, got {self.prefetch_policy!r}")
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {WRITE_POLICIES}, got {self.write_policy!r}")
        for name in ("prefetch_threshold", "load_back_threshold", "prefetch_retry_max_attempts"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.prefetch_retry_poll_interval < 1:
            raise ValueError(
                f"prefetch_retry_poll_interval must be >= 1, got {self.prefetch_retry_poll_interval}"
            )
        if self.io_timeout_s is not None and not self.io_timeout_s > 0:
            raise ValueError(f"io_timeout_s must be > 0 or None, got {self.io_timeout_s}")

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
        sidecars: Sequence[Sidecar] = (),
    ) -> None:
        if host_pool.page_size != config.page_size or device_pool.page_size != config.page_size:
            raise ValueError("host pool, device pool and config must share one page_size")
        names = [sc.name for sc in sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"sidecars: a pool name appears twice: {names}")
        for sc in sidecars:
            if sc.kv_derived and (sc.pool.page_size != config.page_size or sc.pool.size < host_pool.size):
                raise ValueError(
                    f"sidecar {sc.name!r}: a KV-derived pool shares the KV slot indices, so it needs "
                    f"page_size {config.page_size} and at least {host_pool.size} slots"
                )
        self.sidecars = tuple(sidecars)
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
        self._io: DeadlineRunner | None = None
        if config.io_timeout_s is not None:
            self._io = DeadlineRunner(8, name="hicache-readpath-io")

    def bounded(self, fn: Callable[[], T], on_skip: Callable[[], None] | None = None) -> T:
        """Run a backend call, bounded by ``config.io_timeout_s`` (inline when ``None``).
        Past the deadline the call is abandoned and :class:`CallAbandoned` raised; ``fn`` keeps
        running on the deadline runner's worker. ``on_skip`` runs (there) when an abandoned
        call never started, so a caller whose ``fn`` releases resources in a ``finally``
        still gets exactly one release."""
        if self._io is None:
            return fn()
        late = None if on_skip is None else (lambda c: None if c.started else on_skip())
        in_time, call = self._io.run(fn, self.config.io_timeout_s or 0.0, on_late=late)
        if in_time:
            if call.error is not None:
                raise call.error
            return call.result  # type: ignore[return-value]
        raise CallAbandoned(f"backend call abandoned after {self.config.io_timeout_s} s")

    def drain_io(self, timeout_s: float) -> bool:
        """Wait for abandoned backend calls to end (tests, shutdown); True when none is left."""
        return True if self._io is None else self._io.drain(timeout_s)

    @property
    def host_kv(self) -> torch.Tensor:
        return self.host.kv_buffer  # type: ignore[no-any-return]

    # -- host ---------------------------------------------------------------------------------

    @property
    def trailing(self) -> tuple[Sidecar, ...]:
        return tuple(sc for sc in self.sidecars if sc.trailing)

    @property
    def kv_derived(self) -> tuple[Sidecar, ...]:
        return tuple(sc for sc in self.sidecars if sc.kv_derived)

    def free_slots(self, pool: Any, idx: torch.Tensor) -> None:
        """Return ``idx`` to ``pool`` (the KV host pool or a sidecar pool)."""
        if len(idx):
            with self.host_lock:
                pool.free(idx)

    def free_host(self, idx: torch.Tensor) -> None:
        self.free_slots(self.host, idx)

    def alloc_host(self, n: int) -> torch.Tensor | None:
        with self.host_lock:
            return self.host.alloc(n)  # type: ignore[no-any-return]

    def _evict_host_node(self, node: TreeNode) -> int:
        assert node.host_value is not None
        self.free_host(node.host_value)
        n = len(node.host_value)
        node.host_value = None
        pools = {sc.name: sc.pool for sc in self.sidecars}
        for name, slots in node.side.items():
            self.free_slots(pools[name], slots)
        node.side = {}
        self.tree.prune(node)
        return n

    def evict_host(self, n: int) -> int:
        """Free at least ``n`` host slots from unlocked host-only leaves (LRU), with their
        sidecar slots; the KV slots freed."""
        freed = 0
        while freed < n:
            cands = self.tree.evictable_host()
            if not cands:
                break
            freed += self._evict_host_node(cands[0])
        return freed

    def alloc_side_evicting(self, sc: Sidecar, n: int) -> torch.Tensor | None:
        """``n`` slots of sidecar pool ``sc``, evicting host leaves (LRU) while short."""
        with self.host_lock:
            idx = sc.pool.alloc(n)
        while idx is None:
            cands = self.tree.evictable_host()
            if not cands:
                return None
            self._evict_host_node(cands[0])
            with self.host_lock:
                idx = sc.pool.alloc(n)
        return idx  # type: ignore[no-any-return]

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
        if self._io is not None:
            self._io.drain(30.0)
            self._io.shutdown()


class CallAbandoned(TimeoutError):
    """A bounded backend call outlived ``io_timeout_s`` (it still runs; its slots are held)."""
