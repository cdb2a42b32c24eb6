"""Which views a :class:`~hicache_sdk.sglang.linker.TransportLinker` gets for a model, decided
once at construction (:func:`model_views`).

SGLang's own pool-view builder (``resolve_hybrid_device_pool_group``) is used where it serves
a model the public-buffer views do not: DSA models (a ``DSATokenToKVPool``, ``FULL``: the MLA
pool and its indexer) and DeepSeek V4 models (a ``DeepSeekV4TokenToKVPool``, with the
components SGLang pairs with it: ``FULL`` and ``SWA``, or ``FULL``, ``SWA`` and ``C128``).
Each physical pool of its group (``kv``, ``indexer``; V4's ``swa``, ``deepseek_v4_c4``,
``deepseek_v4_c128``, their indexer and compress-state pools, ...) is registered under its
own name through :class:`~.group.PoolEntryView` (one object per page: the entry's page
segments in order); a group without a KV pool (V4) registers a logical ``kv`` anchor, so the
other pools alone decide a hit. SGLang marks these groups rank-replicated: TP rank 0 writes
every pool, other ranks store nothing and report success, and the keys carry no rank.

Every other model gets views built from the pools' public buffers (:mod:`.view`), where
SGLang's builder refuses it or serves it only in part: plain MHA and MLA models (the ``FULL``
component); SWA models (``FULL`` and ``SWA``: an ``SWAKVPool`` whose full and SWA sub-pools
are plain MHA or MLA pools); and hybrid Mamba models (``FULL`` and ``MAMBA``: a
``HybridLinearKVPool`` over a plain MHA or MLA pool, with the ``MambaPool`` of SGLang's
``HybridReqToTokenPool``; and ``FULL``, ``SWA`` and ``MAMBA``). Beside ``kv`` the backend
holds the pools ``swa`` (the SWA layers' pages of the trailing window, SGLang's
``TRAILING_PAGES`` rule) and ``mamba`` (one state slot a page, stored under the last page of
each node: ``TRAILING_PAGES`` with a window of one page), as the HiCache path names them. MLA
KV pages are written by TP rank 0 only; the Mamba state is rank-local, so every rank writes
it, also beside MLA pages.

What neither path serves is refused with a ``ConfigError`` naming it: components a pool does
not pair with, pools holding state the views would not move (scaled KV caches, Mamba side
states, a DSA pool under a Mamba model, a MiniMax sparse pool), and what SGLang's builder
refuses (HiSparse DeepSeek V4, encoder SWA replay, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...spec import PoolName, pool_name_str
from .group import LogicalKVAnchor, group_views, sglang_pool_group
from .view import DeviceKVView, DeviceMambaView

__all__ = ["SUPPORTED_COMPONENTS", "ModelViews", "model_views"]

_KV = PoolName.KV.value
_SWA = PoolName.SWA.value
_MAMBA = PoolName.MAMBA.value
#: The components TransportLinker serves (SGLang's ``ComponentType`` names).
SUPPORTED_COMPONENTS = ("FULL", "SWA", "MAMBA")


@dataclass(frozen=True)
class ModelViews:
    """What a linker moves for one model (see the module docs).

    * ``views``: each backend pool's view by its name (``kv`` first; a plain string);
    * ``pools``: the same views by the name the backend registers them under (a
      :class:`~hicache_sdk.spec.PoolName`, or the entry name of SGLang's pool group);
    * ``view``: the ``kv`` view (a :class:`~.group.LogicalKVAnchor` for a group without a
      KV pool); ``swa_view`` / ``mamba_view``: the public-buffer SWA and Mamba views, if any;
    * ``num_layers``: the layer counter's range (every layer of the stage);
    * ``group``: SGLang's ``DevicePoolGroup`` for the models its builder serves (DSA,
      DeepSeek V4), else ``None``;
    * ``mla``: the pages are rank-replicated (MLA KV, or a rank-replicated group): TP rank 0
      writes them.
    """

    views: dict[str, Any]
    pools: dict[Any, Any]
    view: Any
    num_layers: int
    group: Any = None
    swa_view: DeviceKVView | None = None
    mamba_view: DeviceMambaView | None = None
    mla: bool = False

    @property
    def hybrid(self) -> bool:
        """Pools beside KV (SWA, Mamba, an indexer, ...): such a model loads whole pages,
        then every layer."""
        return self.group is not None or len(self.views) > 1


def _component_names(components: Any) -> list[str]:
    """SGLang's ``ComponentType`` names of ``components``, sorted."""
    return sorted(str(getattr(c, "name", c)) for c in (components or ()))


def model_views(kvcache: Any, params: Any, components: Any, page_size: int) -> ModelViews:
    """The views of the model whose device KV pool is ``kvcache`` (``params``: SGLang's
    ``CacheInitParams``; ``components``: its ``ComponentType`` set); ``ConfigError`` for a
    model neither path serves (see the module docs)."""
    names = _component_names(components)
    # SGLang's own pool group, for the models its view builder serves that the views from
    # public buffers do not (DSA, DeepSeek V4); None otherwise
    group = sglang_pool_group(kvcache, params, components or (), page_size)
    if group is None:
        return _public_buffer_views(kvcache, params, names, page_size)
    views: dict[str, Any] = dict(group_views(group))
    view = views.get(_KV) or LogicalKVAnchor(page_size, next(iter(views.values())).device)
    return ModelViews(
        views=views,
        pools={e.name: views[pool_name_str(e.name)] for e in group.entries},
        view=view,
        num_layers=int(group.num_layers),
        group=group,
        # SGLang marks its DSA and DeepSeek V4 groups rank-replicated: rank 0 writes every
        # pool, and the keys carry no rank (as its Mooncake linker does)
        mla=bool(group.rank_replicated),
    )


def _public_buffer_views(kvcache: Any, params: Any, names: list[str], page_size: int) -> ModelViews:
    """The views of a model SGLang's view builder does not serve, from the pools' public
    buffers (plain, SWA and Mamba models)."""
    unsupported = [n for n in names if n not in SUPPORTED_COMPONENTS]
    if unsupported:
        raise ConfigError(
            f"TransportLinker serves {type(kvcache).__name__} with the FULL component (plain "
            "MHA and MLA models), FULL + SWA (SWA models), FULL + MAMBA and FULL + SWA + MAMBA "
            "(hybrid Mamba models), and DSA and DeepSeek V4 pools with the components SGLang's "
            f"view builder pairs with them; unsupported components: {unsupported}"
        )
    swa_view: DeviceKVView | None = None
    mamba_view: DeviceMambaView | None = None
    if "SWA" in names:
        full, swa = _swa_pools(kvcache)
        view = DeviceKVView(full, page_size)
        swa_view = DeviceKVView(swa, page_size, kind="swa")
        num_layers = int(kvcache.layer_num)
    elif "MAMBA" in names:
        view = DeviceKVView(_mamba_full_pool(kvcache), page_size)
        num_layers = view.layer_num
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
        view = DeviceKVView(kvcache, page_size)
        num_layers = view.layer_num
    if "MAMBA" in names:
        mamba_view = _mamba_view(params.req_to_token_pool)
        num_layers = _hybrid_layer_count(kvcache, params.req_to_token_pool)
    views: dict[str, Any] = {_KV: view}
    pools: dict[Any, Any] = {PoolName.KV: view}
    if swa_view is not None:
        views[_SWA] = swa_view
        pools[PoolName.SWA] = swa_view
    if mamba_view is not None:
        views[_MAMBA] = mamba_view
        pools[PoolName.MAMBA] = mamba_view
    return ModelViews(
        views=views,
        pools=pools,
        view=view,
        num_layers=num_layers,
        swa_view=swa_view,
        mamba_view=mamba_view,
        mla=view.hicache_pool_kind == "mla",
    )


def _swa_pools(kvcache: Any) -> tuple[Any, Any]:
    """The full and SWA sub-pools of an SWA model's ``SWAKVPool``; ``ConfigError`` for any
    other pool (a hybrid pool SGLang's own builder serves, or none)."""
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


def _mamba_view(req_to_token_pool: Any) -> DeviceMambaView:
    """The view of a hybrid Mamba model's state pool (``req_to_token_pool.mamba_pool``);
    ``ConfigError`` for the state SGLang keeps beside it that the view would not move (int8
    checkpoints, side states), as SGLang's own linker refuses them."""
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


def _hybrid_layer_count(kvcache: Any, req_to_token_pool: Any) -> int:
    """The layers of a hybrid Mamba model on this stage (the layer counter's range): the
    full-attention (and SWA) layers and the Mamba layers, stage-local."""
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
