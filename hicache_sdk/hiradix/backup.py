"""The write path (spec 5.8): L1 -> L2 by policy, then L2 -> L3.

* ``write_through``: a node is backed up to host on its first hit (insertion counts as
  one); ``write_through_selective``: on its second; ``write_back``: only when evicted from
  the device (synchronously, before its device slots are freed).
* Sidecar state is produced at the host backup (KV-derived pools at the KV slots, trailing
  pools for the last ``window_pages`` nodes) and written to L3 before the KV.
* Every host backup is followed by a storage backup: the host lock of the last node is held
  until the backup is acknowledged (:meth:`WritePath.drain`), so the host slots the backup
  reads (captured when it is queued) are never evicted and reused under it; the backup job
  checks existence first (``batch_exists``: the leading pages already stored are skipped),
  writes KV in chunks of at most 128 pages and stops at the first failed chunk. Only the
  writer rank writes; every rank reduces once per chunk, so all post the same number of
  acknowledgements.
* Every backup token is accounted for (SGLang's names, tokens): completed pages count as
  ``backuped``, the rest as ``hicache_backup_dropped`` with a reason: ``host_capacity`` (no
  host copy could be made, so no L3 copy will be), ``storage_transfer`` (a write failed or
  came back short), ``deadline`` (a write abandoned past ``io_timeout_s``). Only completed
  pages are marked ``backed_up_storage``: a partial backup never passes for a whole one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import torch

from hicache_sdk.spec import PoolTransfer

from .cache import CHUNK_PAGES, CacheState, CallAbandoned
from .counters import Abort
from .sidecars import transfer, write_side_page
from .tree import TreeNode

T = TypeVar("T")


@dataclass(eq=False)
class BackupOp:
    nodes: list[TreeNode]
    host_indices: list[torch.Tensor]  # each node's host slots, captured when queued
    completed_pages: int = 0
    acks: int = 0
    io_refs: int = 0
    abandoned: bool = False  # a write outlived io_timeout_s


class WritePath:
    def __init__(self, state: CacheState) -> None:
        self.s = state
        self._acks: list[BackupOp] = []
        self._lock = threading.Lock()
        self.ongoing = 0
        self.pages_written = 0
        self.failed_backups = 0
        self.failed_sidecar_backups = 0
        self._late: list[BackupOp] = []
        if state.config.write_policy == "write_back":
            state.on_device_evict.append(self._on_evict)

    def on_hit(self, nodes: list[TreeNode]) -> None:
        """Count a hit on each node of a served path; back up those that reach the policy's threshold."""
        thr = self.s.config.write_through_threshold
        due: list[TreeNode] = []
        for n in nodes:
            n.hit_count += 1
            if self.s.config.write_policy != "write_back" and n.hit_count >= thr and not n.on_host:
                due.append(n)
        self._backup(due)

    def _on_evict(self, node: TreeNode) -> None:
        """Back up the node with its un-backed ancestors (host backups stay contiguous from the root)."""
        if not node.on_host:
            self._backup([n for n in node.path() if n.on_device and not n.on_host])

    def _backup(self, nodes: list[TreeNode]) -> None:
        """Host copy of ``nodes`` (device-resident, in path order), then a storage backup."""
        s = self.s
        done: list[TreeNode] = []
        for n in nodes:
            if n.value is None or n.on_host:
                continue
            if n.parent is not None and not n.parent.is_root and not n.parent.on_host:
                break  # keep host backups contiguous from the root
            idx = s.alloc_host_evicting(len(n.value))
            if idx is None:
                lost = [m for m in nodes[nodes.index(n) :] if m.value is not None and not m.on_host]
                s.counters.backup_dropped(
                    len(lost) * s.config.page_size, "host_capacity", Abort.BACKUP_HOST_FULL
                )
                break
            s.dev.store_to_host(n.value, s.host_kv, idx)
            n.host_value = idx
            done.append(n)
        self._host_sidecars(done)
        if done and s.storage is not None and s.config.storage_enabled:
            s.tree.inc_host_lock_ref(done[-1])
            op = BackupOp(done, [n.host_value for n in done if n.host_value is not None])
            self.ongoing += 1
            s.runner.submit(lambda: self._write(op))

    def _host_sidecars(self, done: list[TreeNode]) -> None:
        """The sidecar part of the host backup (this model produces sidecar state here):
        KV-derived pools at the nodes' KV slots; each trailing pool for the last
        ``window_pages`` nodes of the backup (Mamba: the last node), own slots, skipped when
        its pool is full (the store then lacks it: a later read is a ``sidecar_miss``)."""
        s = self.s
        for sc in s.sidecars:
            if sc.kv_derived:
                for n in done:
                    assert n.host_value is not None and n.hash is not None
                    write_side_page(sc, int(n.host_value[0]), n.hash)
                continue
            for n in done[len(done) - sc.window_pages :]:
                if sc.name in n.side or n.hash is None:
                    continue
                slots = s.alloc_side_evicting(sc, sc.slots_per_page)
                if slots is None:
                    s.counters.abort("", Abort.BACKUP_HOST_FULL)
                    continue
                write_side_page(sc, int(slots[0]), n.hash)
                n.side[sc.name] = slots

    def _io(self, op: BackupOp, fn: Callable[[], T]) -> T:
        """A backend call reading ``op``'s host slots: an I/O reference until it really ends
        (an abandoned write keeps the host lock held, so the slots are not reused under it)."""
        with self._lock:
            op.io_refs += 1

        def end() -> None:
            with self._lock:
                op.io_refs -= 1

        def run() -> T:
            try:
                return fn()
            finally:
                end()

        try:
            return self.s.bounded(run, on_skip=end)
        except CallAbandoned:
            op.abandoned = True
            raise

    def _write_sidecars(self, op: BackupOp) -> None:
        """Sidecars before KV (spec 1.4), one ``batch_set_v2``, from every rank (the adapter
        skips rank-replicated pools on non-writer ranks). A failure is counted, not retried."""
        s = self.s
        xf: list[PoolTransfer] = []
        for sc in s.sidecars:
            nodes = op.nodes if sc.kv_derived else [n for n in op.nodes if sc.name in n.side]
            if not nodes:
                continue
            slots = [n.host_value if sc.kv_derived else n.side[sc.name] for n in nodes]
            idx = torch.cat([t for t in slots if t is not None])
            keys = [n.hash for n in nodes if n.hash is not None]
            xf.append(transfer(sc.name, host_indices=idx, keys=keys, hit_policy=sc.hit_policy))
        if not xf:
            return
        try:
            res = self._io(op, lambda: s.storage.batch_set_v2(xf))  # type: ignore[union-attr]
            ok = all(all(bool(r) for r in v) for v in res.values())
        except Exception:
            ok = False
        if not ok:
            self.failed_sidecar_backups += 1

    def _write(self, op: BackupOp) -> None:
        s = self.s
        keys = [n.hash for n in op.nodes if n.hash is not None]
        writer = s.ranks.rank == s.writer_rank
        if s.sidecars:
            self._write_sidecars(op)
        skip = 0
        if writer:
            try:
                skip = int(self._io(op, lambda: s.storage.batch_exists(keys)))  # type: ignore[union-attr]
            except Exception:
                skip = 0
        stop = False
        for c0 in range(0, len(keys), CHUNK_PAGES):
            ck = keys[c0 : c0 + CHUNK_PAGES]
            ok = len(ck)
            if not writer:
                pass
            elif stop:
                ok = 0
            else:
                lo = max(0, skip - c0)
                if lo < len(ck):
                    idx = torch.cat(op.host_indices[c0 + lo : c0 + len(ck)])
                    try:
                        res = self._io(op, partial(s.storage.batch_set_v1, ck[lo:], idx))  # type: ignore[union-attr]
                        good = all(bool(r) for r in res) and len(res) == len(ck) - lo
                    except Exception:
                        good = False
                    if good:
                        self.pages_written += len(ck) - lo
                    else:
                        ok, stop = 0, True
            ok = s.ranks.min_ints([ok])[0]
            if ok < len(ck):
                stop = True
            else:
                op.completed_pages += ok
            op.acks += 1
        with self._lock:
            self._acks.append(op)

    def drain(self) -> int:
        """Scheduler thread: apply finished backups (mark stored pages, release the host
        lock; a backup with an abandoned write still running keeps its lock until it ends)."""
        with self._lock:
            acks, self._acks = self._acks, []
            late, self._late = self._late, []
        ps = self.s.config.page_size
        for op in acks:
            for n in op.nodes[: op.completed_pages]:
                n.backed_up_storage = True
            self.s.counters.backuped(op.completed_pages * ps)
            if op.completed_pages < len(op.nodes):
                self.failed_backups += 1
                reason, cause = (
                    ("deadline", Abort.BACKUP_ABANDONED)
                    if op.abandoned
                    else ("storage_transfer", Abort.BACKUP_FAILED)
                )
                self.s.counters.backup_dropped((len(op.nodes) - op.completed_pages) * ps, reason, cause)
        for op in late + acks:
            with self._lock:
                busy = op.io_refs > 0
            if busy:
                self._late.append(op)
                continue
            self.s.tree.dec_host_lock_ref(op.nodes[-1])
            self.ongoing -= 1
        return len(acks)
