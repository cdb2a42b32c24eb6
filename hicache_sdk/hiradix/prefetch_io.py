"""The prefetch operation record and its transfer (spec 5.4): chunked KV reads with the
KV-derived sidecars clamped into each chunk, then the trailing pools; and the I/O references
that keep quarantined slots out of reuse until the last read that may fill them has ended."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from hicache_sdk.spec import PoolName, count_pool_hits

from .cache import CHUNK_PAGES, CacheState
from .counters import Abort
from .sidecars import SideRead, leading, transfer
from .tree import TreeNode

T = TypeVar("T")


@dataclass(eq=False)
class PrefetchOp:
    req_id: str
    anchor: TreeNode
    key: list[int]
    prior_hash: str | None
    requested_tokens: int
    hashes: list[str] = field(default_factory=list)
    hit_tokens: int | None = None
    endpoints: list[int] | None = None  # agreed restorable endpoints (pages), TRAILING pools only
    side: list[SideRead] = field(default_factory=list)
    host_indices: torch.Tensor | None = None
    completed_tokens: int = 0
    side_done: bool = False
    io_done: bool = False
    io_refs: int = 0  # the read job plus backend calls abandoned while they may still write
    terminated: bool = False
    finalized: bool = False
    first_blocked_at: float | None = None
    deadline_expired: bool = False  # the timeout policy ended it
    stopped_by: Abort | None = None  # the policy that terminated it (best_effort / timeout)
    quarantined: list[tuple[Any, torch.Tensor]] = field(default_factory=list)
    failed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def io_running(self) -> bool:
        return self.io_refs > 0

    @property
    def hybrid(self) -> bool:
        """Trailing (non-KV-derived) pools take part: acceptance is all-or-nothing."""
        return bool(self.side)


class PrefetchIO:
    """The background half of :class:`~hicache_sdk.hiradix.prefetch.Prefetcher`."""

    s: CacheState
    if TYPE_CHECKING:
        quarantine_ops: set[PrefetchOp]

    # -- 5.4 (background) ---------------------------------------------------------------------

    def _io(self, op: PrefetchOp, fn: Callable[[], T]) -> T:
        """One backend call that may write into ``op``'s slots: it holds an I/O reference
        until it really ends (also when abandoned past the deadline)."""
        with op.lock:
            op.io_refs += 1

        def run() -> T:
            try:
                return fn()
            finally:
                self._io_end(op)

        return self.s.bounded(run, on_skip=lambda: self._io_end(op))

    def _io_end(self, op: PrefetchOp) -> None:
        """Drop one I/O reference; the last one frees the quarantined slots. Lock order:
        ``host_lock`` then ``op.lock`` (so a snapshot under ``host_lock`` sees the quarantine
        and the pools' free lists change together)."""
        with self.s.host_lock, op.lock:
            op.io_refs -= 1
            if op.io_refs or not op.quarantined:
                return
            q, op.quarantined = op.quarantined, []
            for pool, idx in q:
                pool.free(idx)
            self.quarantine_ops.discard(op)

    def _read(self, op: PrefetchOp) -> None:
        s, ps = self.s, self.s.config.page_size
        assert op.host_indices is not None
        derived = s.kv_derived
        stop = False
        try:
            for c0 in range(0, len(op.hashes), CHUNK_PAGES):
                keys = op.hashes[c0 : c0 + CHUNK_PAGES]
                got = 0
                if not stop and not op.terminated:
                    idx = op.host_indices[c0 * ps : (c0 + len(keys)) * ps]
                    try:
                        got = leading(self._io(op, partial(s.storage.batch_get_v1, keys, idx)))  # type: ignore[union-attr]
                        if derived and got:
                            xf = [
                                transfer(sc.name, host_indices=idx, keys=keys, indices_from_pool=PoolName.KV)
                                for sc in derived
                            ]
                            res = self._io(op, partial(s.storage.batch_get_v2, xf))  # type: ignore[union-attr]
                            got = min([got, *count_pool_hits({k: list(v) for k, v in res.items()}).values()])
                    except Exception:
                        got = 0
                    if got < len(keys):
                        stop = True
                        op.failed = True
                got = s.ranks.min_ints([got])[0]  # every rank reduces once per chunk
                if got < len(keys):
                    stop = True
                with op.lock:
                    if not op.finalized:
                        op.completed_tokens += got * ps
            if op.side:
                self._read_side(op, run=not stop and not op.terminated)
        finally:
            with op.lock:
                op.io_done = True
            self._io_end(op)

    def _read_side(self, op: PrefetchOp, run: bool) -> None:
        """Trailing pools after the KV (spec 1.4 step 3): only when every KV chunk succeeded;
        per-pool leading runs MIN-reduced in a fixed order (every rank, 0 when skipped)."""
        s = self.s
        runs = [0] * len(op.side)
        if run:
            xf = [
                transfer(sr.sc.name, host_indices=sr.slots, keys=sr.keys, hit_policy=sr.sc.hit_policy)
                for sr in op.side
            ]
            try:
                res = self._io(op, partial(s.storage.batch_get_v2, xf))  # type: ignore[union-attr]
                runs = [leading(res.get(sr.sc.name, [])) for sr in op.side]
            except Exception:
                runs = [0] * len(op.side)
        runs = s.ranks.min_ints(runs)
        with op.lock:
            for sr, n in zip(op.side, runs):
                sr.hits = n
            op.side_done = True
