"""``prefetch_from_storage`` and the admission gate, in 0.5.23's order (spec 5.1-5.5).

Flow: :meth:`Prefetcher.prefetch_from_storage` (scheduler thread) runs the early exits,
pins the anchor on host, reserves occupancy and submits the hit query; the query job
(background) hashes the span, calls ``batch_exists`` and MIN-reduces the hit across ranks;
:meth:`Prefetcher.drain` (scheduler thread) applies the threshold check, allocates host
slots sized to the hit (evicting, then partial down to the threshold, else revoking) and
submits the chunked read (at most 128 pages a chunk, stopping at the first short chunk but
still reducing once per chunk); :meth:`Prefetcher.check_prefetch_progress` is the
admission gate with the three policies.

Quarantine: when an operation finishes while its read job still runs (timeout,
``best_effort`` termination, cancel), the host slots past ``completed_tokens`` may still be
written by that read, so they are not freed then: the read job frees them when it ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from .cache import CHUNK_PAGES, CacheState
from .counters import Abort
from .tree import TreeNode


@dataclass(eq=False)
class PrefetchOp:
    req_id: str
    anchor: TreeNode
    key: list[int]
    prior_hash: str | None
    requested_tokens: int
    hashes: list[str] = field(default_factory=list)
    hit_tokens: int | None = None
    host_indices: torch.Tensor | None = None
    completed_tokens: int = 0
    io_done: bool = False
    io_running: bool = False
    terminated: bool = False
    finalized: bool = False
    first_blocked_at: float | None = None
    quarantined: torch.Tensor | None = None
    failed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Prefetcher:
    def __init__(self, state: CacheState) -> None:
        self.s = state
        self.ongoing: dict[str, PrefetchOp] = {}
        self.tokens_occupied = 0
        self._hits: list[PrefetchOp] = []
        self._hits_lock = threading.Lock()
        self.loaded_from_storage = 0

    @property
    def capacity_limit(self) -> int:
        return int(0.5 * self.s.host.size)

    # -- 5.1 ----------------------------------------------------------------------------------

    def prefetch_from_storage(
        self, req_id: str, last_host_node: TreeNode, new_input_tokens: list[int]
    ) -> bool:
        """Start an L3 prefetch of ``new_input_tokens`` (the tokens after the device and host
        hits) under ``last_host_node``. ``False`` when an early exit applies (counted)."""
        s, cfg = self.s, self.s.config
        tr = s.counters.trace(req_id)
        if not cfg.storage_enabled or s.storage is None or req_id in self.ongoing:
            return False
        if not (last_host_node.is_root or last_host_node.on_host):
            s.counters.abort(req_id, Abort.ANCHOR_NOT_BACKED_UP)
            return False
        ps = cfg.page_size
        key = list(new_input_tokens[: len(new_input_tokens) // ps * ps])
        tr.storage_candidate_tokens = len(key)
        if len(key) < cfg.effective_prefetch_threshold:
            s.counters.abort(req_id, Abort.BELOW_THRESHOLD)
            return False
        if self.tokens_occupied >= self.capacity_limit:
            s.counters.abort(req_id, Abort.CAPACITY)
            return False
        s.tree.inc_host_lock_ref(last_host_node)
        op = PrefetchOp(req_id, last_host_node, key, last_host_node.hash, len(key))
        self.ongoing[req_id] = op
        self.tokens_occupied += len(key)
        s.runner.submit(lambda: self._query(op))
        return True

    # -- 5.2 (background) ---------------------------------------------------------------------

    def _query(self, op: PrefetchOp) -> None:
        s = self.s
        hashes = s.tree.hashes(op.key, op.prior_hash)
        pages = 0
        if not op.terminated:
            try:
                pages = int(s.storage.batch_exists(hashes))  # type: ignore[union-attr]
            except Exception:
                s.counters.abort(op.req_id, Abort.BACKEND_FAILURE)
                pages = 0
        pages = s.ranks.min_ints([pages])[0]
        op.hashes = hashes
        op.hit_tokens = max(0, min(pages, len(hashes))) * s.config.page_size
        with self._hits_lock:
            self._hits.append(op)

    # -- 5.3 (scheduler thread) ---------------------------------------------------------------

    def drain(self) -> None:
        with self._hits_lock:
            hits, self._hits = self._hits, []
        s = self.s
        thr = s.config.effective_prefetch_threshold
        for op in hits:
            if self.ongoing.get(op.req_id) is not op or op.terminated:
                continue
            assert op.hit_tokens is not None
            s.counters.trace(op.req_id).storage_hit_tokens = op.hit_tokens
            if op.hit_tokens < thr:
                s.counters.abort(op.req_id, Abort.BELOW_THRESHOLD)
                self._revoke(op)
                continue
            idx = s.alloc_host_evicting(op.hit_tokens, min_tokens=thr)
            if idx is None:
                s.counters.abort(op.req_id, Abort.HOST_POOL_FULL)
                self._revoke(op)
                continue
            op.hit_tokens = len(idx)
            op.hashes = op.hashes[: len(idx) // s.config.page_size]
            op.host_indices = idx
            op.io_running = True
            s.runner.submit(lambda op=op: self._read(op))  # type: ignore[misc]

    # -- 5.4 (background) ---------------------------------------------------------------------

    def _read(self, op: PrefetchOp) -> None:
        s, ps = self.s, self.s.config.page_size
        assert op.host_indices is not None
        stop = False
        try:
            for c0 in range(0, len(op.hashes), CHUNK_PAGES):
                keys = op.hashes[c0 : c0 + CHUNK_PAGES]
                got = 0
                if not stop and not op.terminated:
                    idx = op.host_indices[c0 * ps : (c0 + len(keys)) * ps]
                    try:
                        res = s.storage.batch_get_v1(keys, idx)  # type: ignore[union-attr]
                        while got < len(keys) and got < len(res) and res[got]:
                            got += 1
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
        finally:
            with op.lock:
                op.io_running = False
                op.io_done = True
                q, op.quarantined = op.quarantined, None
            if q is not None:
                s.free_host(q)

    # -- 5.5 (scheduler thread) ---------------------------------------------------------------

    def check_prefetch_progress(self, req_id: str) -> bool:
        """The admission gate: ``True`` when the request may be scheduled now."""
        self.drain()
        op = self.ongoing.get(req_id)
        if op is None:
            return True
        policy = self.s.config.prefetch_policy
        if op.io_done:
            self._finish(op)
            return True
        if policy == "best_effort":
            self._terminate(op)
            return True
        if policy == "wait_complete":
            return False
        now = self.s.clock.now()
        if op.first_blocked_at is None:
            op.first_blocked_at = now
        landed = op.host_indices is not None and op.completed_tokens >= (op.hit_tokens or 0)
        if landed:
            return False
        if now - op.first_blocked_at >= self.s.config.timeout_for(op.requested_tokens):
            self.s.counters.abort(req_id, Abort.TIMEOUT)
            self._terminate(op)
            return True
        return False

    def cancel(self, req_id: str) -> None:
        """The request went away: finish its prefetch without inserting anything."""
        op = self.ongoing.get(req_id)
        if op is not None:
            op.terminated = True
            if op.host_indices is None:
                self._revoke(op)
            else:
                self._finish(op, insert=False)

    def _terminate(self, op: PrefetchOp) -> None:
        op.terminated = True
        if op.host_indices is None:
            self._revoke(op)
        else:
            self._finish(op)

    def _release(self, op: PrefetchOp) -> None:
        self.ongoing.pop(op.req_id, None)
        self.s.tree.dec_host_lock_ref(op.anchor)
        self.tokens_occupied -= op.requested_tokens

    def _revoke(self, op: PrefetchOp) -> None:
        op.terminated = True
        self._release(op)

    def _finish(self, op: PrefetchOp, insert: bool = True) -> None:
        """Insert the completed prefix as host-only nodes; free duplicates; free or quarantine the tail."""
        s, ps = self.s, self.s.config.page_size
        assert op.host_indices is not None
        with op.lock:
            op.finalized = True
            done = op.completed_tokens if insert else 0
            tail = op.host_indices[done:]
            if op.io_running and len(tail):
                op.quarantined = tail
                tail = tail[:0]
        if len(tail):
            s.free_host(tail)
        loaded = 0
        if done:
            nodes = s.tree.insert(op.anchor, op.key[:done])
            for i, node in enumerate(nodes):
                slots = op.host_indices[i * ps : (i + 1) * ps]
                if node.on_host:
                    s.free_host(slots)
                else:
                    node.host_value = slots
                    loaded += ps
                node.backed_up_storage = True
        tr = s.counters.trace(op.req_id)
        tr.host_filled_tokens = done
        tr.loaded_from_storage_tokens = loaded
        self.loaded_from_storage += loaded
        self._release(op)
