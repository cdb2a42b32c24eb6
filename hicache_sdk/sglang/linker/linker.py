"""``TransportLinker``: SGLang's ``UnifiedCacheLinker`` over any hicache-sdk backend.

SGLang 0.5.23 loads it through its ``dynamic`` linker backend::

    --enable-unified-cache-external-linker --unified-cache-external-linker-backend dynamic
    --unified-cache-external-linker-config '{"linker": "TransportLinker",
        "linker_module_path": "hicache_sdk.sglang.linker",
        "linker_extra_config": {"backend": "file", "backend_config": {...}}}'

(``hicache sglang-args NAME --linker`` prints these flags.) The factory calls
``TransportLinker(server_args, params, components=..., extra_config=..., forward_stream=...)``.

How it maps onto the backend: the device KV pool is registered with the backend (a
:class:`~hicache_sdk.paged.adapter.PagedStorage`) as a ``layer_first`` host pool through
:class:`~.view.DeviceKVView`; a transfer's ``device_indices`` are that view's host
indices. So hit rules, key schemes, headers, integrity checks, deadlines and the breaker
are the backend's own, once:

* ``lookup`` is the backend's ``batch_exists_v2(...).restorable_prefix_pages``;
* a load batch is read layer by layer through the transport's ranged reads where they are
  cheap (:mod:`.layerwise`: file, Mooncake), else with one ``batch_get_v2``; layer ``l`` is
  completed on the layer counter only after its bytes in every page are in the device pool
  (on CPU pools the transport reads into the pool's segments directly), in layer order; a
  failed page fails the batch, so ``finish_layer_wise_loading`` returns ``False``; nothing
  raises into the forward pass;
* an offload is one ``batch_set_v2`` after the ``record_offload_ready`` events; its result
  is ``True`` only when every page is stored. Results pop in submission order.

Rules: ``load`` and ``offload`` only queue (they validate their arguments and raise
``ValueError`` for bad ones: :mod:`.transfers`); nothing touches device memory before
``start_layer_wise_loading``; ``cancel_queued_load`` before the start drops the load; MLA
pages are written by TP rank 0 only (``offload`` on another rank stores none of them and
reports success, as SGLang's Mooncake linker does); ``reset`` waits for every queued load
and offload and drops queued loads and unconsumed results; ``close`` is idempotent.

Scope: plain MHA and MLA models, SWA models and hybrid Mamba models get views built from the
pools' public buffers; DSA and DeepSeek V4 models get a view per physical pool of SGLang's
own pool-view builder; what neither serves is refused at construction with a
``ConfigError`` naming it (:mod:`.models` says which model gets which views).

For every model with pools beside its KV, ``lookup`` is the same ``batch_exists_v2`` fold
over every pool, so its set of restorable lengths can be sparse (a length needs its
window's SWA pages, its Mamba state, its indexer pages); a load reads every pool's pages
whole and then completes every layer (the layer counter spans the stage's layers; for
Mamba it is registered with the request pool, where the Mamba layers wait); an offload
stores every pool's pages, atomically as one result (the Mamba state is rank-local: every
rank writes it, also beside MLA pages). CPU device pools are read and written in place;
other device pools (CUDA) go through a host staging ring per pool (:mod:`.staging`; the
backend and its rings are built by :mod:`.store`).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any, Optional

import torch

from ...spec import HiCacheStorageExtraInfo, PoolName, PoolTransfer
from .models import model_views
from .setup import LinkerSettings, rank_of
from .store import build_store, ranged_loader, staging_rings
from .transfers import PoolBatch, lookup_request, pool_batches, pool_transfer

if TYPE_CHECKING:

    class _Base:  # what TransportLinker uses of SGLang's UnifiedCacheLinker
        def record_offload_ready(self) -> list[Any]: ...

    LayerWiseLoadCounter: Any = None
else:
    from sglang.srt.mem_cache.unified_cache.unified_cache_linker import (
        LayerWiseLoadCounter,
    )
    from sglang.srt.mem_cache.unified_cache.unified_cache_linker import (
        UnifiedCacheLinker as _Base,
    )

__all__ = ["LinkerLoadError", "TransportLinker"]

log = logging.getLogger(__name__)

_KV = PoolName.KV.value
_SWA = PoolName.SWA.value
_MAMBA = PoolName.MAMBA.value


class LinkerLoadError(RuntimeError):
    """Why a layer-wise load batch failed (held by the layer counter, never raised into
    the forward pass: ``finish_layer_wise_loading`` reports ``False``)."""


class TransportLinker(_Base):
    """See the module docs."""

    def __init__(
        self,
        server_args: Any,
        params: Any,
        *,
        components: Any = None,
        extra_config: Optional[dict[str, Any]] = None,
        forward_stream: Any = None,
    ) -> None:
        self.forward_stream = forward_stream
        self.settings = LinkerSettings.from_mapping(extra_config)
        self.page_size = int(params.page_size)
        kvcache = params.token_to_kv_pool_allocator.get_kvcache()
        #: which views this model gets (:mod:`.models`)
        self.model_views = model = model_views(kvcache, params, components, self.page_size)
        #: SGLang's own pool group (DSA, DeepSeek V4), else ``None``
        self.group = model.group
        self.view, self.swa_view, self.mamba_view = model.view, model.swa_view, model.mamba_view
        self.pools, self._views, self.num_layers = model.pools, model.views, model.num_layers
        self._rings = staging_rings(self.settings, kvcache, model.views)
        self.ring = self._rings.get(_KV)
        self.swa_ring = self._rings.get(_SWA)
        self.mamba_ring = self._rings.get(_MAMBA)
        #: pools beside KV (SWA, Mamba, an indexer, ...): such a model loads whole pages,
        #: then every layer
        self.hybrid = model.hybrid
        self.tp_rank, self.tp_size = rank_of(self.settings, server_args, params)
        self.mla = model.mla
        # MLA KV pages (and a rank-replicated group) are written by TP rank 0 only; a
        # rank-sharded pool beside MLA pages (Mamba state) by every rank (the backend skips
        # the rank-replicated pools on other ranks)
        self.offload_owner = not self.mla or self.tp_rank == 0 or self.mamba_view is not None
        self.store = build_store(
            self.settings, server_args, params, model, self._rings, tp_rank=self.tp_rank, tp_size=self.tp_size
        )
        self._ranged = ranged_loader(self.settings, self.store, model, self._rings)
        self.layer_done_counter = LayerWiseLoadCounter(self.num_layers)
        if self.mamba_view is not None:
            # the Mamba layers wait on the counter through the request pool, as SGLang's
            # Mooncake linker sets it up
            register = getattr(params.req_to_token_pool, "register_layer_transfer_counter", None)
            if callable(register):
                register(self.layer_done_counter)
        self._pending: dict[str, dict[str, PoolBatch]] = {}
        self._lock = threading.Lock()
        self._loads: queue.Queue[tuple[int, list[dict[str, PoolBatch]], Any] | None] = queue.Queue()
        self._offloads: queue.Queue[tuple[dict[str, PoolBatch], list[Any], Optional[str]] | None] = (
            queue.Queue()
        )
        self._results: queue.Queue[bool] = queue.Queue()
        self._closed = False
        self._load_thread = threading.Thread(target=self._load_loop, daemon=True, name="hicache-linker-load")
        self._offload_thread = threading.Thread(
            target=self._offload_loop, daemon=True, name="hicache-linker-offload"
        )
        self._load_thread.start()
        self._offload_thread.start()

    # -- arguments ---------------------------------------------------------------------------
    def _batches(self, transfers: Any, op: str) -> dict[str, PoolBatch] | None:
        """Each pool's keys and device slots (:func:`.transfers.pool_batches`)."""
        return pool_batches(self.model_views, transfers, op)

    _transfer = staticmethod(pool_transfer)

    # -- lookup ------------------------------------------------------------------------------
    def lookup(self, rid: str, transfers: list[Any]) -> list[int]:
        """Every prefix length (pages) that can be restored, ascending: the backend's
        ``batch_exists_v2`` fold over the KV pages and each other pool's transfer (an SWA
        model's trailing window: a length needs the window's SWA pages too, so the set is
        sparse; for SGLang's pool group, every pool it resolves the transfers to); local to
        this rank (keys carry the rank where the pages are rank-local). An I/O failure is a
        miss (``[]``)."""
        request = lookup_request(self.model_views, transfers)
        if request is None:
            return []
        keys, extra = request
        try:
            result = self.store.batch_exists_v2(keys, extra)
        except ValueError:
            raise
        except Exception as e:  # never raise an I/O failure into the scheduler
            log.warning("linker lookup failed (%s): a miss", type(e).__name__)
            return []
        restorable = result.restorable_prefix_pages
        if restorable is None:
            return list(range(1, int(result.kv_hit_pages) + 1))
        return sorted(int(p) for p in restorable)

    # -- loads -------------------------------------------------------------------------------
    def load(self, rid: str, transfers: list[Any]) -> bool:
        """Queue a load into the transfers' device slots (nothing moves until
        ``start_layer_wise_loading``). ``False`` when there is nothing to load or the
        linker is closed; ``ValueError`` for bad arguments or a rid already queued."""
        batch = self._batches(transfers, "load")
        if batch is None or self._closed:
            return False
        with self._lock:
            if rid in self._pending:
                raise ValueError(f"load: rid {rid!r} already has a queued load")
            self._pending[rid] = batch
        return True

    def cancel_queued_load(self, rid: str) -> bool:
        with self._lock:
            return self._pending.pop(rid, None) is not None

    def start_layer_wise_loading(self) -> int:
        """Start every queued load as one batch; its layer-counter index, or -1 when none
        was queued."""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        if not pending or self._closed:
            return -1
        index: int = self.layer_done_counter.update_producer()
        ready = self._event()
        self._loads.put((index, pending, ready))
        return index

    def finish_layer_wise_loading(self, counter_index: int) -> bool:
        """Wait until batch ``counter_index`` stops writing device memory; ``True`` when
        every layer landed. Never raises."""
        if counter_index < 0:
            return True
        try:
            return bool(self.layer_done_counter.finish(counter_index))
        except Exception as e:
            log.warning("linker finish failed (%s)", type(e).__name__)
            return False

    def _event(self) -> Any:
        module = getattr(torch, self.view.device.type)
        event = module.Event()
        event.record()
        return event

    def _load_loop(self) -> None:
        while True:
            task = self._loads.get()
            try:
                if task is None:
                    return
                index, batches, ready = task
                self._load_batch(index, batches, ready)
            finally:
                self._loads.task_done()

    def _load_batch(self, index: int, loads: list[dict[str, PoolBatch]], ready: Any) -> None:
        counter = self.layer_done_counter
        try:
            ready.synchronize()
            if self.hybrid:
                self._load_pools(index, loads)
                return
            batches = [b[_KV] for b in loads]
            if self.ring is not None:
                rows = torch.cat([b.indices for b in batches])
                self.ring.load(self.store, counter, index, [k for b in batches for k in b.keys], rows)
                return
            if self._ranged is not None:
                page_keys = [k for b in batches for k in b.keys]
                starts = [int(s) for b in batches for s in b.indices[:: self.page_size].tolist()]
                self._ranged.load(counter, index, page_keys, starts)
                return
            self._get_whole([self._transfer(batches)])
            for layer in range(self.num_layers):  # every page's bytes are in the pool
                counter.complete(index, layer)
        except BaseException as e:
            log.warning("linker load batch %d failed: %s", index, e)
            try:
                counter.fail(index, e if isinstance(e, Exception) else LinkerLoadError(str(e)))
            except Exception:  # a reset dropped the batch meanwhile
                pass

    def _load_pools(self, index: int, loads: list[dict[str, PoolBatch]]) -> None:
        """A batch of a model with pools beside its KV (SWA, Mamba, SGLang's pool group):
        every pool's pages whole, then every layer completes."""
        counter = self.layer_done_counter
        per_pool: dict[str, list[PoolBatch]] = {}
        for load in loads:
            for name, b in load.items():
                per_pool.setdefault(name, []).append(b)
        if self._rings:
            for name, batches in per_pool.items():
                ring = self._rings[name]
                rows = torch.cat([b.indices for b in batches])
                ring.load(
                    self.store, counter, index, [k for b in batches for k in b.keys], rows, complete=False
                )
        else:
            self._get_whole([self._transfer(batches, name) for name, batches in per_pool.items()])
        for layer in range(self.num_layers):  # every pool's bytes are in the device pools
            counter.complete(index, layer)

    def _get_whole(self, transfers: list[PoolTransfer]) -> None:
        """One ``batch_get_v2`` of ``transfers``; ``LinkerLoadError`` unless every page
        loaded."""
        results = self.store.batch_get_v2(transfers)
        got = [ok for oks in results.values() for ok in oks]
        missing = got.count(False)
        if missing or not got:
            raise LinkerLoadError(f"{missing} of {len(got)} pages did not load")

    # -- offloads ----------------------------------------------------------------------------
    def offload(self, transfers: list[Any], session_id: Optional[str] = None) -> bool:
        """Queue the pages for storage after the ``record_offload_ready`` events; one
        result per call pops from ``pop_completed_offload`` in call order. ``False`` when
        there is nothing to store or the linker is closed."""
        batch = self._batches(transfers, "offload")
        if batch is None or self._closed:
            return False
        if not self.offload_owner:  # MLA alone: another rank holds the same bytes and writes them
            self._results.put(True)
            return True
        self._offloads.put((batch, list(self.record_offload_ready()), session_id))
        return True

    def _offload_loop(self) -> None:
        while True:
            task = self._offloads.get()
            try:
                if task is None:
                    return
                batch, events, session_id = task
                self._results.put(self._store_batch(batch, events, session_id))
            finally:
                self._offloads.task_done()

    def _store_batch(self, batch: dict[str, PoolBatch], events: list[Any], session_id: Optional[str]) -> bool:
        try:
            for event in events:
                event.synchronize()
            info = HiCacheStorageExtraInfo(extra_info={"session_id": session_id}) if session_id else None
            if self._rings:
                for name, b in batch.items():
                    ring = self._rings[name]
                    if not ring.offload(self.store, b.keys, b.indices, info):
                        return False
                return True
            results = self.store.batch_set_v2([self._transfer([b], name) for name, b in batch.items()], info)
            oks = [ok for pool in results.values() for ok in pool]
            return bool(oks) and all(oks)
        except Exception as e:
            log.warning("linker offload failed (%s): reported as failed", type(e).__name__)
            return False

    def num_completed_offloads(self) -> int:
        return self._results.qsize()

    def pop_completed_offload(self) -> bool:
        """The oldest completed offload's result (``False`` when none is waiting)."""
        try:
            return self._results.get_nowait()
        except queue.Empty:
            return False

    # -- lifecycle ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop queued loads, wait for started loads and queued offloads, drop unconsumed
        results and reset the layer counter."""
        with self._lock:
            self._pending.clear()
        self._loads.join()
        self._offloads.join()
        while True:
            try:
                self._results.get_nowait()
            except queue.Empty:
                break
        self.layer_done_counter.reset()

    def close(self) -> None:
        """Quiesce (as :meth:`reset`), stop the threads and close the backend. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.reset()
        self._loads.put(None)
        self._offloads.put(None)
        self._load_thread.join()
        self._offload_thread.join()
        self.store.close()

    def __repr__(self) -> str:
        if self.group is not None:
            kind = "+".join(self._views)
        else:
            kind = self.view.hicache_pool_kind + "".join(f"+{name}" for name in self._views if name != _KV)
        return (
            f"TransportLinker(backend={self.settings.backend!r}, kind={kind!r}, "
            f"layers={self.num_layers}, tp_rank={self.tp_rank}/{self.tp_size})"
        )
