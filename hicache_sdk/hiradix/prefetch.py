"""``prefetch_from_storage`` and the admission gate, in 0.5.23's order (spec 5.1-5.5).

Flow: :meth:`Prefetcher.prefetch_from_storage` (scheduler thread) runs the early exits,
pins the anchor on host, reserves occupancy and submits the hit query; the query job
(background) hashes the span, calls ``batch_exists`` (``batch_exists_v2`` with sidecar
pools) and reduces the hit across ranks (MIN, or the restorable-endpoint flag vectors when
a TRAILING pool is present); :meth:`Prefetcher.drain` (scheduler thread) applies the
threshold check, allocates host slots sized to the hit (evicting, then partial down to the
threshold, else revoking) plus the trailing pools' staging, and submits the chunked read
(at most 128 pages a chunk, KV-derived sidecars clamped into each chunk, stopping at the
first short chunk but still reducing once per chunk; then the trailing pools);
:meth:`Prefetcher.check_prefetch_progress` is the admission gate with the three policies and
the all-or-nothing acceptance of trailing pools. Retries (spec 5.5) live in
:mod:`hicache_sdk.hiradix.retry`.

Quarantine: when an operation finishes while its read may still run (timeout,
``best_effort`` termination, cancel, or a backend call abandoned past ``io_timeout_s``), the
host slots it may still fill (KV past ``completed_tokens`` and the sidecar staging) are not
freed then: the last I/O reference to end (the read job, or the abandoned call) frees them.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .cache import CacheState
from .counters import Abort
from .prefetch_io import PrefetchIO, PrefetchOp
from .ranks import restorable_flags
from .retry import Retries
from .sidecars import SideRead, exists_transfers
from .tree import TreeNode

__all__ = ["PrefetchOp", "Prefetcher"]


class Prefetcher(PrefetchIO):
    def __init__(self, state: CacheState) -> None:
        self.s = state
        self.ongoing: dict[str, PrefetchOp] = {}
        self.tokens_occupied = 0
        self._hits: list[PrefetchOp] = []
        self._hits_lock = threading.Lock()
        self.retries = Retries(state.config)
        self.quarantine_ops: set[PrefetchOp] = set()  # ops holding quarantined slots (under host_lock)
        #: per request, the host nodes its last prefetch filled from L3 (admission settles them)
        self.loaded_nodes: dict[str, list[TreeNode]] = {}

    @property
    def capacity_limit(self) -> int:
        return int(0.5 * self.s.host.size)

    # -- 5.1 ----------------------------------------------------------------------------------

    def prefetch_from_storage(
        self, req_id: str, last_host_node: TreeNode, new_input_tokens: list[int], *, retry: bool = False
    ) -> bool:
        """Start an L3 prefetch of ``new_input_tokens`` (the tokens after the device and host
        hits) under ``last_host_node``. ``False`` when an early exit applies (aborts counted).
        ``retry``: this call is the re-issue of an armed retry (else a pending retry, or an
        expired wait budget, exits early)."""
        s, cfg = self.s, self.s.config
        tr = s.counters.trace(req_id)
        if not cfg.storage_enabled or s.storage is None:
            return False
        if (not retry and self.retries.pending(req_id)) or self.retries.expired(req_id):
            return False
        if req_id in self.ongoing:
            return False
        ps = cfg.page_size
        key = list(new_input_tokens[: len(new_input_tokens) // ps * ps])
        tr.storage_candidate_tokens = len(key)
        if not (last_host_node.is_root or last_host_node.on_host):
            s.counters.decline(req_id, len(key), "anchor_not_backed_up", Abort.ANCHOR_NOT_BACKED_UP)
            return False
        if len(key) < cfg.effective_prefetch_threshold:
            s.counters.decline(req_id, len(key), "too_short", Abort.BELOW_THRESHOLD)
            return False
        if self.tokens_occupied >= self.capacity_limit:
            s.counters.decline(req_id, len(key), "rate_limited", Abort.CAPACITY)
            self.retries.arm(req_id)
            return False
        s.tree.inc_host_lock_ref(last_host_node)
        op = PrefetchOp(req_id, last_host_node, key, last_host_node.hash, len(key))
        self.ongoing[req_id] = op
        self.tokens_occupied += len(key)
        s.runner.submit(lambda: self._query(op))
        return True

    # -- 5.2 (background) ---------------------------------------------------------------------

    def _query(self, op: PrefetchOp) -> None:
        s, ps = self.s, self.s.config.page_size
        hashes = s.tree.hashes(op.key, op.prior_hash)
        xfers = exists_transfers(s.sidecars, len(hashes), op.anchor.is_root) if s.sidecars else []
        trailing = {str(t.name) for t in xfers if t.keys is not None}
        pages, restorable = 0, None
        if not op.terminated:
            try:
                if xfers:
                    res = s.bounded(lambda: s.storage.batch_exists_v2(hashes, xfers))  # type: ignore[union-attr]
                    pages, restorable = int(res.kv_hit_pages), res.restorable_prefix_pages
                else:
                    pages = int(s.bounded(lambda: s.storage.batch_exists(hashes)))  # type: ignore[union-attr]
            except Exception:
                s.counters.abort(op.req_id, Abort.BACKEND_FAILURE)
                pages, restorable = 0, []
        pages = max(0, min(pages, len(hashes)))
        if trailing:  # spec 2.3: intersect the restorable sets of every rank
            flags = s.ranks.min_ints(restorable_flags(len(hashes), pages, restorable))
            op.endpoints = [p for p, f in enumerate(flags) if f and p > 0]
            pages = max([0, *op.endpoints])
            op.side = [
                SideRead(sc, len(t.keys or ())) for sc in s.trailing for t in xfers if str(t.name) == sc.name
            ]
        else:
            pages = s.ranks.min_ints([pages])[0]
        op.hashes = hashes
        op.hit_tokens = pages * ps
        with self._hits_lock:
            self._hits.append(op)

    # -- 5.3 (scheduler thread) ---------------------------------------------------------------

    def drain(self) -> None:
        with self._hits_lock:
            hits, self._hits = self._hits, []
        s, ps = self.s, self.s.config.page_size
        thr = s.config.effective_prefetch_threshold
        for op in hits:
            if self.ongoing.get(op.req_id) is not op or op.terminated:
                continue
            assert op.hit_tokens is not None
            req, hit = op.req_id, op.hit_tokens
            c = s.counters
            c.trace(req).storage_hit_tokens = hit
            c.hit(req, hit)
            if hit < thr:
                c.abort(req, Abort.BELOW_THRESHOLD)
                c.finish(req, 0, "below_threshold", Abort.BELOW_THRESHOLD, hit_tokens=hit, threshold=thr)
                self._revoke(op, retry=True)
                continue
            idx = s.alloc_host_evicting(hit, min_tokens=thr)
            if idx is not None and op.endpoints is not None and len(idx) < hit:
                # partial allocation with TRAILING pools: end on an agreed restorable endpoint
                pages = max([0, *(p for p in op.endpoints if p * ps <= len(idx))])
                s.free_host(idx[pages * ps :])
                idx = idx[: pages * ps]
                if pages * ps < thr:
                    s.free_host(idx)
                    idx = None
            cause = Abort.HOST_POOL_FULL
            if idx is not None and not self._alloc_side(op, len(idx) // ps):
                s.free_host(idx)
                idx, cause = None, Abort.AUX_ALLOC_FAILED
            if idx is None:
                # nothing stages: the whole hit is unfulfilled now and waits for a retry
                c.abort(req, cause)
                free = s.host.available_size()
                c.finish(req, 0, "host_capacity", cause, hit_tokens=hit, free_tokens=free)
                c.defer(req, hit, "host_capacity", cause)
                self._revoke(op, retry=True)
                continue
            if len(idx) < hit:
                # cut to what the host pool could stage (0.5.23's partial allocation)
                c.abort(req, Abort.HOST_POOL_SHORT)
                c.resolve(
                    req,
                    hit - len(idx),
                    "host_capacity",
                    Abort.HOST_POOL_SHORT,
                    hit_tokens=hit,
                    kept_tokens=len(idx),
                )
            op.hit_tokens = len(idx)
            op.hashes = op.hashes[: len(idx) // ps]
            op.host_indices = idx
            op.io_refs = 1
            s.runner.submit(lambda op=op: self._read(op))  # type: ignore[misc]

    def _alloc_side(self, op: PrefetchOp, pages: int) -> bool:
        """Staging slots of each trailing pool for the last ``window`` pages of the hit
        (``_sync_trailing_keys``); on failure everything allocated here is freed."""
        got: list[SideRead] = []
        for sr in op.side:
            sr.window = min(sr.window, pages)
            sr.keys = op.hashes[pages - sr.window : pages]
            sr.slots = self.s.alloc_side_evicting(sr.sc, sr.window * sr.sc.slots_per_page)
            if sr.slots is None:
                self.s.counters.aux_alloc_failed(op.req_id, sr.window * sr.sc.slots_per_page, sr.sc.name)
                for g in got:
                    assert g.slots is not None
                    self.s.free_slots(g.sc.pool, g.slots)
                    g.slots = None
                return False
            got.append(sr)
        return True

    # -- 5.5 (scheduler thread) ---------------------------------------------------------------

    def check_prefetch_progress(self, req_id: str, queue_head: bool = True) -> bool:
        """The admission gate: ``True`` when the request may be scheduled now. A request
        with an armed retry waits for it unless it is the ``queue_head``.

        ``timeout``: the deadline is a termination condition of its own: it holds while
        a sidecar (auxiliary pool) read is still pending after the KV landed (SGLang
        0.5.23 ignored it then; fixed upstream by sgl-project/sglang#35181). A hybrid
        prefetch cut by it is discarded whole (all-or-nothing), as any incomplete one."""
        self.drain()
        op = self.ongoing.get(req_id)
        if op is None:
            return queue_head or not self.retries.pending(req_id)
        policy = self.s.config.prefetch_policy
        if op.io_done:
            self._finish(op)
            return True
        if policy == "best_effort":
            self._terminate(op, Abort.BEST_EFFORT)
            return True
        if policy == "wait_complete":
            return False
        now = self.s.clock.now()
        if op.first_blocked_at is None:
            op.first_blocked_at = now
        if now - op.first_blocked_at >= self.s.config.timeout_for(op.requested_tokens):
            self.s.counters.abort(req_id, Abort.TIMEOUT)
            self.retries.expire(req_id)
            op.deadline_expired = True
            self._terminate(op, Abort.TIMEOUT)
            return True
        return False

    def cancel(self, req_id: str) -> None:
        """The request went away: finish its prefetch without inserting anything (its open
        storage hit is excluded from the lifecycle counters, as SGLang excludes aborts)."""
        self.retries.forget(req_id)
        self.s.counters.discard(req_id)
        self.loaded_nodes.pop(req_id, None)
        op = self.ongoing.get(req_id)
        if op is not None:
            op.terminated = True
            if op.host_indices is None:
                self._revoke(op)
            else:
                self._finish(op, insert=False)

    def _terminate(self, op: PrefetchOp, cause: Abort) -> None:
        """The policy stops ``op`` (``best_effort`` at the first poll, ``timeout`` at its
        deadline): revoke before host staging, else keep what completed."""
        op.terminated = True
        op.stopped_by = cause
        if op.host_indices is None:
            if cause is Abort.BEST_EFFORT:  # the hit query had not returned: L3 never used
                self.s.counters.abort(op.req_id, cause)
            self._revoke(op)
        else:
            self._finish(op)

    def _release(self, op: PrefetchOp) -> None:
        self.ongoing.pop(op.req_id, None)
        self.s.tree.dec_host_lock_ref(op.anchor)
        self.tokens_occupied -= op.requested_tokens

    def _revoke(self, op: PrefetchOp, retry: bool = False) -> None:
        op.terminated = True
        # SGLang's revoke counts any hit token still open as ``dropped``; every path here
        # resolves the hit first, so this counts nothing unless that ever changes
        self.s.counters.finish(op.req_id, 0, "dropped")
        self._release(op)
        if retry:
            self.retries.arm(op.req_id)

    def _accepted(self, op: PrefetchOp) -> bool:
        """Spec 2.4 ``_check_hybrid_prefetch_result``: with trailing pools, KV must have
        completed the whole planned hit and each pool's leading run must cover its keys.
        A discarded prefetch's hit is unfulfilled: ``deadline`` when the timeout cut it,
        else ``storage_transfer``."""
        if not op.hybrid:
            return True
        cause: Abort | None = None
        if not op.side_done or op.completed_tokens < (op.hit_tokens or 0):
            cause = Abort.HYBRID_INCOMPLETE
        elif any((sr.hits or 0) < len(sr.keys) for sr in op.side):
            cause = Abort.SIDECAR_MISS
        if cause is None:
            return True
        c = self.s.counters
        c.abort(op.req_id, cause)
        reason = "deadline" if op.deadline_expired else "storage_transfer"
        c.finish(
            op.req_id, 0, reason, cause, hit_tokens=op.hit_tokens or 0, completed_tokens=op.completed_tokens
        )
        return False

    def _finish(self, op: PrefetchOp, insert: bool = True) -> None:
        """Insert the completed prefix as host-only nodes (after the hybrid acceptance check),
        commit trailing-pool states onto the last nodes, free duplicates; free or quarantine
        the rest. Staged tokens the read did not complete are unfulfilled (``deadline``
        after the timeout, else ``storage_transfer``)."""
        s, ps = self.s, self.s.config.page_size
        assert op.host_indices is not None
        insert = insert and self._accepted(op)
        with s.host_lock, op.lock:  # the lock order of _io_end
            op.finalized = True
            done = op.completed_tokens if insert else 0
            free: list[tuple[Any, torch.Tensor]] = [(s.host, op.host_indices[done:])]
            keep_side = insert and op.hybrid
            for sr in op.side:
                if sr.slots is not None and not keep_side:
                    free.append((sr.sc.pool, sr.slots))
            free = [(p, t) for p, t in free if len(t)]
            if op.io_running and free:
                op.quarantined, free = free, []
                self.quarantine_ops.add(op)
        for pool, idx in free:
            s.free_slots(pool, idx)
        staged = len(op.host_indices)
        if insert and done < staged:
            cause = op.stopped_by or Abort.READ_FAILED
            if cause is not Abort.TIMEOUT:  # the timeout was recorded at the gate
                s.counters.abort(op.req_id, cause)
            reason = "deadline" if op.deadline_expired else "storage_transfer"
            s.counters.resolve(
                op.req_id, staged - done, reason, cause, hit_tokens=staged, completed_tokens=done
            )
        s.counters.prefetched(done)
        loaded = 0
        new_nodes: list[TreeNode] = []
        if done:
            nodes = s.tree.insert(op.anchor, op.key[:done])
            for i, node in enumerate(nodes):
                slots = op.host_indices[i * ps : (i + 1) * ps]
                if node.on_host:
                    s.free_host(slots)
                else:
                    node.host_value = slots
                    loaded += ps
                    new_nodes.append(node)
                node.backed_up_storage = True
            if keep_side:
                self._commit_side(op, nodes)
        s.counters.resolve(op.req_id, done - loaded)  # the host already held those: not counted
        if insert:
            self.loaded_nodes[op.req_id] = new_nodes
        tr = s.counters.trace(op.req_id)
        tr.host_filled_tokens = done
        tr.loaded_from_storage_tokens = loaded
        self._release(op)

    def _commit_side(self, op: PrefetchOp, nodes: list[TreeNode]) -> None:
        """Attach each trailing pool's fetched pages to the last ``window`` nodes (a node that
        already holds that pool's state keeps it; the duplicate is freed)."""
        for sr in op.side:
            assert sr.slots is not None
            k = sr.sc.slots_per_page
            for j, node in enumerate(nodes[len(nodes) - sr.window :]):
                slots = sr.slots[j * k : (j + 1) * k]
                if sr.sc.name in node.side:
                    self.s.free_slots(sr.sc.pool, slots)
                else:
                    node.side[sr.sc.name] = slots
