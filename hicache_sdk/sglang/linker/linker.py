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
``ValueError`` for bad ones); nothing touches device memory before
``start_layer_wise_loading``; ``cancel_queued_load`` before the start drops the load; MLA
pages are written by TP rank 0 only (``offload`` on another rank stores none of them and
reports success, as SGLang's Mooncake linker does); ``reset`` waits for every queued load
and offload and drops queued loads and unconsumed results; ``close`` is idempotent.

Scope, and where each view comes from. SGLang's own pool-view builder
(``resolve_hybrid_device_pool_group``) is used where it serves a model the public-buffer
views do not: DSA models (a ``DSATokenToKVPool``, ``FULL``: the MLA pool and its indexer)
and DeepSeek V4 models (a ``DeepSeekV4TokenToKVPool``, with the components SGLang pairs
with it: ``FULL`` and ``SWA``, or ``FULL``, ``SWA`` and ``C128``). Each physical pool of its
group (``kv``, ``indexer``; V4's ``swa``, ``deepseek_v4_c4``, ``deepseek_v4_c128``, their
indexer and compress-state pools, ...) is registered under its own name through
:class:`~.group.PoolEntryView` (one object per page: the entry's page segments in order); a
group without a KV pool (V4) registers a logical ``kv`` anchor, so the other pools alone
decide a hit. SGLang's ``resolve_transfers`` expands the ``kv`` and ``swa`` transfers into
one per physical pool, with the ``ALL_PAGES`` rule for the pools the KV pages address and
the source's rule (the SWA window's ``TRAILING_PAGES``) for the others. SGLang marks these
groups rank-replicated: TP rank 0 writes every pool, other ranks store nothing and report
success, and the keys carry no rank.

Every other model gets views built from the pools' public buffers (:mod:`.view`), where
SGLang's builder refuses it or serves it only in part: plain MHA and MLA models (the
``FULL`` component); SWA models (``FULL`` and ``SWA``: an ``SWAKVPool`` whose full and SWA
sub-pools are plain MHA or MLA pools); and hybrid Mamba models (``FULL`` and ``MAMBA``: a
``HybridLinearKVPool`` over a plain MHA or MLA pool, with the ``MambaPool`` of SGLang's
``HybridReqToTokenPool``; and ``FULL``, ``SWA`` and ``MAMBA``). Beside ``kv`` the backend
holds the pools ``swa`` (the SWA layers' pages of the trailing window, SGLang's
``TRAILING_PAGES`` rule) and ``mamba`` (one state slot a page, stored under the last page
of each node: ``TRAILING_PAGES`` with a window of one page), as the HiCache path names them.

For every model with pools beside its KV, ``lookup`` is the same ``batch_exists_v2`` fold
over every pool, so its set of restorable lengths can be sparse (a length needs its
window's SWA pages, its Mamba state, its indexer pages); a load reads every pool's pages
whole and then completes every layer (the layer counter spans the stage's layers; for
Mamba it is registered with the request pool, where the Mamba layers wait); an offload
stores every pool's pages, atomically as one result (the Mamba state is rank-local: every
rank writes it, also beside MLA pages). What neither path serves is refused at
construction with a ``ConfigError`` naming it: components a pool does not pair with,
pools holding state the views would not move (scaled KV caches, Mamba side states, a DSA
pool under a Mamba model, a MiniMax sparse pool), and what SGLang's builder refuses
(HiSparse DeepSeek V4, encoder SWA replay, ...). CPU device pools are read and written in place; other device pools (CUDA)
go through a host staging ring per pool (:mod:`.staging`).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import torch

from ...errors import ConfigError
from ...spec import HiCacheStorageExtraInfo, PoolName, PoolTransfer, pool_name_str
from .group import LogicalKVAnchor, group_views, sglang_pool_group
from .layerwise import RangedLoader, ranged_reads_usable
from .setup import LinkerSettings, model_name_of, rank_of
from .staging import StagingRing
from .view import DeviceKVView, DeviceMambaView

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
#: The components TransportLinker serves (SGLang's ``ComponentType`` names).
SUPPORTED_COMPONENTS = ("FULL", "SWA", "MAMBA")


class LinkerLoadError(RuntimeError):
    """Why a layer-wise load batch failed (held by the layer counter, never raised into
    the forward pass: ``finish_layer_wise_loading`` reports ``False``)."""


def _component_names(components: Any) -> list[str]:
    return sorted(str(getattr(c, "name", c)) for c in (components or ()))


class _Batch:
    """One queued transfer of one pool: page keys and their device slots."""

    __slots__ = ("keys", "indices")

    def __init__(self, keys: list[str], indices: torch.Tensor) -> None:
        self.keys = keys
        self.indices = indices


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
        names = _component_names(components)
        self.page_size = int(params.page_size)
        kvcache = params.token_to_kv_pool_allocator.get_kvcache()
        #: SGLang's own pool group, for the models its view builder serves that the views
        #: from public buffers do not (DSA, DeepSeek V4); ``None`` otherwise
        self.group = sglang_pool_group(kvcache, params, components or (), self.page_size)
        self.swa_view: DeviceKVView | None = None
        self.mamba_view: DeviceMambaView | None = None
        if self.group is not None:
            self._views: dict[str, Any] = dict(group_views(self.group))
            self.num_layers = int(self.group.num_layers)
            self.view: Any = self._views.get(_KV) or LogicalKVAnchor(
                self.page_size, next(iter(self._views.values())).device
            )
            self.pools: dict[Any, Any] = {
                e.name: self._views[pool_name_str(e.name)] for e in self.group.entries
            }
        else:
            self._public_buffer_views(kvcache, params, names)
        self._rings: dict[str, StagingRing] = {}
        for name, view in self._views.items():
            ring = self._staging_ring(kvcache, view, name)
            if ring is not None:
                self._rings[name] = ring
        self.ring = self._rings.get(_KV)
        self.swa_ring = self._rings.get(_SWA)
        self.mamba_ring = self._rings.get(_MAMBA)
        #: pools beside KV (SWA, Mamba, an indexer, ...): such a model loads whole pages,
        #: then every layer
        self.hybrid = self.group is not None or len(self._views) > 1
        self.tp_rank, self.tp_size = rank_of(self.settings, server_args, params)
        if self.group is not None:
            # SGLang marks its DSA and DeepSeek V4 groups rank-replicated: rank 0 writes
            # every pool, and the keys carry no rank (as its Mooncake linker does)
            self.mla = bool(self.group.rank_replicated)
            self.offload_owner = not self.mla or self.tp_rank == 0
        else:
            self.mla = self.view.hicache_pool_kind == "mla"
            # MLA KV pages are written by TP rank 0 only; a rank-sharded pool beside them
            # (Mamba state) by every rank (the backend skips the rank-replicated pools on
            # other ranks)
            self.offload_owner = not self.mla or self.tp_rank == 0 or self.mamba_view is not None
        self.store = self._build_store(server_args, params)
        if self.hybrid and self.settings.ranged_reads:
            self.store.close()
            raise ConfigError(
                "ranged_reads: a model with pools beside its KV (SWA, Mamba, DSA, DeepSeek V4) "
                "loads its pools page by page, not layer by layer"
            )
        self._ranged = self._ranged_loader() if not self._rings and not self.hybrid else None
        self.layer_done_counter = LayerWiseLoadCounter(self.num_layers)
        if self.mamba_view is not None:
            # the Mamba layers wait on the counter through the request pool, as SGLang's
            # Mooncake linker sets it up
            register = getattr(params.req_to_token_pool, "register_layer_transfer_counter", None)
            if callable(register):
                register(self.layer_done_counter)
        self._pending: dict[str, dict[str, _Batch]] = {}
        self._lock = threading.Lock()
        self._loads: queue.Queue[tuple[int, list[dict[str, _Batch]], Any] | None] = queue.Queue()
        self._offloads: queue.Queue[tuple[dict[str, _Batch], list[Any], Optional[str]] | None] = queue.Queue()
        self._results: queue.Queue[bool] = queue.Queue()
        self._closed = False
        self._load_thread = threading.Thread(target=self._load_loop, daemon=True, name="hicache-linker-load")
        self._offload_thread = threading.Thread(
            target=self._offload_loop, daemon=True, name="hicache-linker-offload"
        )
        self._load_thread.start()
        self._offload_thread.start()

    # -- construction ------------------------------------------------------------------------
    def _public_buffer_views(self, kvcache: Any, params: Any, names: list[str]) -> None:
        """The views of a model SGLang's view builder does not serve, from the pools'
        public buffers (plain, SWA and Mamba models)."""
        unsupported = [n for n in names if n not in SUPPORTED_COMPONENTS]
        if unsupported:
            raise ConfigError(
                f"TransportLinker serves {type(kvcache).__name__} with the FULL component (plain "
                "MHA and MLA models), FULL + SWA (SWA models), FULL + MAMBA and FULL + SWA + MAMBA "
                "(hybrid Mamba models), and DSA and DeepSeek V4 pools with the components SGLang's "
                f"view builder pairs with them; unsupported components: {unsupported}"
            )
        if "SWA" in names:
            full, swa = self._swa_pools(kvcache)
            self.view = DeviceKVView(full, self.page_size)
            self.swa_view = DeviceKVView(swa, self.page_size, kind="swa")
            self.num_layers = int(kvcache.layer_num)
        elif "MAMBA" in names:
            self.view = DeviceKVView(self._mamba_full_pool(kvcache), self.page_size)
            self.num_layers = self.view.layer_num
        else:
            if hasattr(kvcache, "swa_kv_pool"):
                raise ConfigError(
                    f"{type(kvcache).__name__} holds an SWA pool, but the linker was built without "
                    "the SWA component"
                )
            if hasattr(kvcache, "full_attention_layer_id_mapping"):
                raise ConfigError(
                    f"{type(kvcache).__name__} is a hybrid linear-attention pool, but the linker was "
                    "built without the MAMBA component"
                )
            self.view = DeviceKVView(kvcache, self.page_size)
            self.num_layers = self.view.layer_num
        if "MAMBA" in names:
            self.mamba_view = self._mamba_view(params.req_to_token_pool)
            self.num_layers = self._hybrid_layer_count(kvcache, params.req_to_token_pool)
        self._views = {_KV: self.view}
        self.pools = {PoolName.KV: self.view}
        if self.swa_view is not None:
            self._views[_SWA] = self.swa_view
            self.pools[PoolName.SWA] = self.swa_view
        if self.mamba_view is not None:
            self._views[_MAMBA] = self.mamba_view
            self.pools[PoolName.MAMBA] = self.mamba_view

    @staticmethod
    def _swa_pools(kvcache: Any) -> tuple[Any, Any]:
        """The full and SWA sub-pools of an SWA model's ``SWAKVPool``; ``ConfigError`` for
        any other pool (a hybrid pool SGLang's own builder serves, or none)."""
        name = type(kvcache).__name__
        full, swa = getattr(kvcache, "full_kv_pool", None), getattr(kvcache, "swa_kv_pool", None)
        if full is None or swa is None:
            raise ConfigError(
                f"the SWA component needs an SWA pool with full_kv_pool and swa_kv_pool, got {name}"
            )
        mapping = getattr(kvcache, "layers_mapping", None)
        layer_num = getattr(kvcache, "layer_num", None)
        if not isinstance(mapping, dict) or not isinstance(layer_num, int) or len(mapping) != layer_num:
            raise ConfigError(f"{name}: no layers_mapping covering its {layer_num!r} layers")
        return full, swa

    @staticmethod
    def _mamba_full_pool(kvcache: Any) -> Any:
        """The full-attention pool of a hybrid Mamba model's ``HybridLinearKVPool``;
        ``ConfigError`` for any other pool."""
        full = getattr(kvcache, "full_kv_pool", None)
        if full is None or not isinstance(getattr(kvcache, "full_attention_layer_id_mapping", None), dict):
            raise ConfigError(
                "the MAMBA component needs a hybrid linear-attention pool (HybridLinearKVPool: "
                f"full_kv_pool and full_attention_layer_id_mapping), got {type(kvcache).__name__}"
            )
        if getattr(kvcache, "use_dsa", False):
            raise ConfigError(
                f"{type(kvcache).__name__}: a DSA full-attention pool (an indexer beside the KV): "
                "TransportLinker serves Mamba models over plain MHA or MLA pools"
            )
        return full

    @staticmethod
    def _mamba_view(req_to_token_pool: Any) -> DeviceMambaView:
        """The view of a hybrid Mamba model's state pool (``req_to_token_pool.mamba_pool``);
        ``ConfigError`` for the state SGLang keeps beside it that the view would not move
        (int8 checkpoints, side states), as SGLang's own linker refuses them."""
        mamba = getattr(req_to_token_pool, "mamba_pool", None)
        cache = getattr(mamba, "mamba_cache", None)
        if cache is None:
            raise ConfigError(
                "the MAMBA component needs SGLang's hybrid request pool with a mamba_pool "
                f"(HybridReqToTokenPool), got {type(req_to_token_pool).__name__}"
            )
        extra = []
        if getattr(req_to_token_pool, "mamba_ckpt_pool", None) is not None:
            extra.append("an int8 Mamba checkpoint pool")
        for attr in ("short_conv_pool", "ngram_pool"):
            if getattr(getattr(req_to_token_pool, attr, None), "enabled", False):
                extra.append(f"a {attr}")
        if getattr(mamba, "_slot_siblings", ()):
            extra.append("slot side states")
        if extra:
            raise ConfigError(
                f"{type(mamba).__name__} keeps state beside its conv and temporal states "
                f"({', '.join(extra)}): TransportLinker serves plain Mamba state pools"
            )
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool

        translate = getattr(type(req_to_token_pool), "translate_mamba_indices", None)
        if translate is not None and translate is not HybridReqToTokenPool.translate_mamba_indices:
            raise ConfigError(
                f"{type(req_to_token_pool).__name__} translates Mamba slot ids (virtual slots: "
                "--enable-unified-memory): TransportLinker serves Mamba pools whose slot ids are rows"
            )
        return DeviceMambaView(cache.temporal, cache.conv, name=type(mamba).__name__)

    @staticmethod
    def _hybrid_layer_count(kvcache: Any, req_to_token_pool: Any) -> int:
        """The layers of a hybrid Mamba model on this stage (the layer counter's range):
        the full-attention (and SWA) layers and the Mamba layers, stage-local."""
        start = int(getattr(kvcache, "start_layer", 0) or 0)
        ids: list[int] = []
        for mapping in (
            getattr(kvcache, "full_attention_layer_id_mapping", None),
            getattr(kvcache, "layers_mapping", None),
            getattr(req_to_token_pool, "mamba_map", None),
        ):
            if isinstance(mapping, dict):
                ids.extend(int(layer) - start for layer in mapping)
        if not ids:
            raise ConfigError(f"{type(kvcache).__name__}: no layer mapping to count the model's layers")
        return max(ids) + 1

    def _staging_ring(self, kvcache: Any, view: Any, name: Any = PoolName.KV) -> StagingRing | None:
        """The host staging ring when pages must go through host memory: always for a
        pool a transport cannot address (not on the CPU), or when ``staging`` asks."""
        wanted = self.settings.staging
        if wanted is False and not view.is_cpu:
            raise ConfigError(
                f"staging: false, but the device pool is on {view.device.type!r}: a transport "
                "reads and writes host memory only"
            )
        if wanted or (wanted is None and not view.is_cpu):
            return StagingRing(kvcache, view, self.settings.staging_pages, name)
        return None

    def _build_store(self, server_args: Any, params: Any) -> Any:
        from ...config.storage import HiCacheStorageConfig
        from ...registry import create_backend

        storage_config = HiCacheStorageConfig(
            tp_rank=self.tp_rank,
            tp_size=self.tp_size,
            pp_rank=int(getattr(params, "pp_rank", 0)),
            pp_size=int(getattr(params, "pp_size", 1)),
            attn_cp_rank=int(getattr(params, "attn_cp_rank", 0)),
            attn_cp_size=int(getattr(params, "attn_cp_size", 1)),
            is_mla_model=self.mla,
            is_page_first_layout=False,
            model_name=model_name_of(server_args),
            extra_config={},
        )
        store = create_backend(self.settings.backend, storage_config, dict(self.settings.backend_config))
        hosts = {
            name: self._rings[name].mirror if name in self._rings else v for name, v in self._views.items()
        }
        anchor = hosts.get(_KV, self.view)  # a group without a KV pool: a logical anchor
        try:
            store.register_mem_pool_host(anchor)
            store.register_mem_host_pool_v2(anchor, PoolName.KV)
            for key in self.pools:
                name = pool_name_str(key)
                if name != _KV:
                    store.register_mem_host_pool_v2(hosts[name], key)
        except BaseException:
            store.close()
            raise
        return store

    def _ranged_loader(self) -> RangedLoader | None:
        wanted = self.settings.ranged_reads
        if wanted is False:
            return None
        if ranged_reads_usable(self.store):
            return RangedLoader(self.store, self.view)
        if wanted:
            self.store.close()
            raise ConfigError(
                f"ranged_reads: backend {self.settings.backend!r} cannot load layer by layer (its transport "
                "has no cheap native read_ranges, or its key scheme has no page trailer)"
            )
        return None

    # -- arguments ---------------------------------------------------------------------------
    def _batches(self, transfers: Sequence[Any], op: str) -> dict[str, _Batch] | None:
        """Each pool's keys and device slots, the KV pool first (``None`` when the KV
        transfer has no keys; for SGLang's pool group, when it resolves to none: see
        :meth:`_resolve`); ``ValueError`` naming what is wrong."""
        names = self._names(transfers, op)
        if self.group is not None:
            load = op == "load"
            resolved = self._resolve(transfers, names, allow_partial=True, allow_missing_kv=load)
            out = {}
            for t in resolved:
                name = pool_name_str(t.name)
                batch = self._batch(t.keys, t.host_indices, name, op)
                if batch is not None:
                    out[name] = batch
            return out or None
        if names.count(_KV) != 1:
            raise ValueError(f"{op}: expected one KV transfer, got {names.count(_KV)}")
        out = {}
        for name in sorted(names, key=lambda n: n != _KV):
            t = transfers[names.index(name)]
            indices = t.device_indices if t.device_indices is not None else t.host_indices
            batch = self._batch(t.keys, indices, name, op)
            if batch is None and name == _KV:
                return None
            if batch is not None:
                out[name] = batch
        return out

    def _names(self, transfers: Sequence[Any], op: str) -> list[str]:
        """The pool name of each transfer; ``ValueError`` for a pool this linker does not
        serve, or two transfers of one pool."""
        if not isinstance(transfers, (list, tuple)):
            raise ValueError(
                f"{op}: transfers must be a list of PoolTransfer, got {type(transfers).__name__}"
            )
        names = [pool_name_str(getattr(t, "name", None)) for t in transfers]
        served = self._logical_pools()
        others = [n for n in names if n not in served]
        if others:
            raise ValueError(
                f"{op}: TransportLinker serves the pools {served} here, got transfers for {others}"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"{op}: more than one transfer for a pool: {names}")
        return names

    def _logical_pools(self) -> list[str]:
        """The pools SGLang's transfers name: the views' pools, or for SGLang's pool group
        the pools its entries take their keys and slots from (``kv``, ``swa``)."""
        if self.group is None:
            return sorted(self._views)
        return sorted({pool_name_str(s) for s in self.group.sources.values()})

    def _resolve(
        self, transfers: Sequence[Any], names: list[str], *, allow_partial: bool, allow_missing_kv: bool
    ) -> list[Any]:
        """SGLang's pool group's expansion of the transfers into one per physical pool
        (``DevicePoolGroup.resolve_transfers``: each entry takes its source's keys and
        slots, and the ``ALL_PAGES`` rule when the source is the KV pool, the source's
        rule otherwise); ``[]`` when it finds nothing to move."""
        assert self.group is not None
        sources = {pool_name_str(s): s for s in self.group.sources.values()}
        named = [
            t if t.name is sources[n] else dataclasses.replace(t, name=sources[n])
            for t, n in zip(transfers, names)
        ]
        resolved: list[Any] = self.group.resolve_transfers(
            named, allow_partial=allow_partial, allow_missing_kv=allow_missing_kv
        )
        return resolved

    def _batch(self, keys: Any, indices: Any, name: str, op: str) -> _Batch | None:
        keys = list(keys or [])
        if not keys:
            return None
        if not all(isinstance(k, str) for k in keys):
            raise ValueError(f"{op}: transfer keys must be str")
        if not isinstance(indices, torch.Tensor):
            raise ValueError(f"{op}: the {name} transfer has no device_indices tensor")
        indices = indices.detach().to(device="cpu", dtype=torch.int64).flatten()
        view = self._views[name]
        if indices.numel() != len(keys) * view.page_size:
            where = "" if name == _KV else f" of the {name} pool"
            raise ValueError(
                f"{op}: {indices.numel()} device indices for {len(keys)} pages{where} of {view.page_size} slots"
            )
        from ...hostpool.describe import page_starts

        arg = f"{op}: device_indices" if name == _KV else f"{op}: {name} device_indices"
        page_starts(indices, view.page_size, view.size, arg=arg)
        return _Batch(keys, indices)

    @staticmethod
    def _transfer(batches: Sequence[_Batch], name: Any = PoolName.KV) -> PoolTransfer:
        keys = [k for b in batches for k in b.keys]
        indices = torch.cat([b.indices for b in batches]) if len(batches) > 1 else batches[0].indices
        return PoolTransfer(name=name, host_indices=indices, keys=keys)

    # -- lookup ------------------------------------------------------------------------------
    def lookup(self, rid: str, transfers: list[Any]) -> list[int]:
        """Every prefix length (pages) that can be restored, ascending: the backend's
        ``batch_exists_v2`` fold over the KV pages and each other pool's transfer (an SWA
        model's trailing window: a length needs the window's SWA pages too, so the set is
        sparse; for SGLang's pool group, every pool it resolves the transfers to); local to
        this rank (keys carry the rank where the pages are rank-local). An I/O failure is a
        miss (``[]``)."""
        names = [pool_name_str(getattr(t, "name", None)) for t in transfers]
        keys = list(transfers[names.index(_KV)].keys or []) if _KV in names else []
        if not keys:
            return []
        served = self._logical_pools()
        unknown = [n for n in names if n not in served]
        if unknown:
            raise ValueError(f"lookup: TransportLinker serves the pools {served} here, got {unknown}")
        if self.group is not None:
            resolved = self._resolve(transfers, names, allow_partial=False, allow_missing_kv=False)
            if not resolved:  # a pool's transfer is missing: nothing is restorable
                return []
            extra = [t for t in resolved if pool_name_str(t.name) != _KV]
        else:
            extra = [t for t, n in zip(transfers, names) if n != _KV]
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

    def _load_batch(self, index: int, loads: list[dict[str, _Batch]], ready: Any) -> None:
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
            results = self.store.batch_get_v2([self._transfer(batches)])
            got = [ok for oks in results.values() for ok in oks]
            missing = got.count(False)
            if missing or not got:
                raise LinkerLoadError(f"{missing} of {len(got)} pages did not load")
            for layer in range(self.num_layers):  # every page's bytes are in the pool
                counter.complete(index, layer)
        except BaseException as e:
            log.warning("linker load batch %d failed: %s", index, e)
            try:
                counter.fail(index, e if isinstance(e, Exception) else LinkerLoadError(str(e)))
            except Exception:  # a reset dropped the batch meanwhile
                pass

    def _load_pools(self, index: int, loads: list[dict[str, _Batch]]) -> None:
        """A batch of a model with pools beside its KV (SWA, Mamba, SGLang's pool group):
        every pool's pages whole, then every layer completes."""
        counter = self.layer_done_counter
        per_pool: dict[str, list[_Batch]] = {}
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
            transfers = [self._transfer(batches, name) for name, batches in per_pool.items()]
            results = self.store.batch_get_v2(transfers)
            got = [ok for oks in results.values() for ok in oks]
            missing = got.count(False)
            if missing or not got:
                raise LinkerLoadError(f"{missing} of {len(got)} pages did not load")
        for layer in range(self.num_layers):  # every pool's bytes are in the device pools
            counter.complete(index, layer)

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

    def _store_batch(self, batch: dict[str, _Batch], events: list[Any], session_id: Optional[str]) -> bool:
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
