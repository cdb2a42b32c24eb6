"""The backend a :class:`~hicache_sdk.sglang.linker.TransportLinker` moves pages with, and
how its views reach it: the host staging rings (:mod:`.staging`), the backend built by name
(as the ``dynamic`` HiCache bridge builds it) with each view, or its ring's mirror,
registered as a ``layer_first`` host pool, and the layer-by-layer loader (:mod:`.layerwise`).

CPU device pools are registered themselves (the transport reads and writes them in place);
other device pools (CUDA) go through a host staging ring per pool, which the backend
registers instead. A ``ConfigError`` closes the backend it built before it is raised.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ...spec import PoolName, pool_name_str
from .layerwise import RangedLoader, ranged_reads_usable
from .models import ModelViews
from .setup import LinkerSettings, model_name_of
from .staging import StagingRing

__all__ = ["build_store", "ranged_loader", "staging_rings"]

_KV = PoolName.KV.value


def staging_rings(settings: LinkerSettings, kvcache: Any, views: dict[str, Any]) -> dict[str, StagingRing]:
    """A host staging ring per view whose pages must go through host memory: always for a
    pool a transport cannot address (not on the CPU), or when ``staging`` asks."""
    rings: dict[str, StagingRing] = {}
    for name, view in views.items():
        wanted = settings.staging
        if wanted is False and not view.is_cpu:
            raise ConfigError(
                f"staging: false, but the device pool is on {view.device.type!r}: a transport "
                "reads and writes host memory only"
            )
        if wanted or (wanted is None and not view.is_cpu):
            rings[name] = StagingRing(kvcache, view, settings.staging_pages, name)
    return rings


def build_store(
    settings: LinkerSettings,
    server_args: Any,
    params: Any,
    model: ModelViews,
    rings: dict[str, StagingRing],
    *,
    tp_rank: int,
    tp_size: int,
) -> Any:
    """The backend ``settings.backend``, with every pool of ``model`` registered (its ring's
    mirror where it has a ring); a group without a KV pool registers its logical anchor."""
    from ...config.storage import HiCacheStorageConfig
    from ...registry import create_backend

    storage_config = HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=int(getattr(params, "pp_rank", 0)),
        pp_size=int(getattr(params, "pp_size", 1)),
        attn_cp_rank=int(getattr(params, "attn_cp_rank", 0)),
        attn_cp_size=int(getattr(params, "attn_cp_size", 1)),
        is_mla_model=model.mla,
        is_page_first_layout=False,
        model_name=model_name_of(server_args),
        extra_config={},
    )
    store = create_backend(settings.backend, storage_config, dict(settings.backend_config))
    hosts = {name: rings[name].mirror if name in rings else v for name, v in model.views.items()}
    anchor = hosts.get(_KV, model.view)  # a group without a KV pool: a logical anchor
    try:
        store.register_mem_pool_host(anchor)
        store.register_mem_host_pool_v2(anchor, PoolName.KV)
        for key in model.pools:
            name = pool_name_str(key)
            if name != _KV:
                store.register_mem_host_pool_v2(hosts[name], key)
    except BaseException:
        store.close()
        raise
    return store


def ranged_loader(
    settings: LinkerSettings, store: Any, model: ModelViews, rings: dict[str, StagingRing]
) -> RangedLoader | None:
    """The layer-by-layer loader when ``ranged_reads`` asks for it or, by default, where the
    backend reads ranges cheaply: only for a plain model whose pool has no staging ring.
    ``ConfigError`` (the store closed) when ``ranged_reads: true`` cannot be served."""
    if model.hybrid and settings.ranged_reads:
        store.close()
        raise ConfigError(
            "ranged_reads: a model with pools beside its KV (SWA, Mamba, DSA, DeepSeek V4) "
            "loads its pools page by page, not layer by layer"
        )
    wanted = settings.ranged_reads
    if rings or model.hybrid or wanted is False:
        return None
    if ranged_reads_usable(store):
        return RangedLoader(store, model.view)
    if wanted:
        store.close()
        raise ConfigError(
            f"ranged_reads: backend {settings.backend!r} cannot load layer by layer (its transport "
            "has no cheap native read_ranges, or its key scheme has no page trailer)"
        )
    return None
