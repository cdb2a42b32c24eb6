"""What the SGLang bridge checks about the inner backend and the host pools SGLang registers.

* :func:`implements_v1`: whether a backend really implements ``batch_get_v1`` and
  ``batch_set_v1`` (neither method is the ABC's default: ours raises
  ``NotImplementedError``, SGLang 0.5.23's returns ``None``). The bridge turns this into
  ``extra_config["interface_v1"]`` so that SGLang picks the zero-copy path only for
  backends that serve it, and the generic ``batch_get``/``batch_set`` path otherwise.
* :func:`unservable_pool`: why a registered host pool cannot be served (``None`` when it
  can). Refused, each with the reason in the message:

  - a pool with a ``storage_format_tag`` (SGLang's ``UnifiedPageEnvelopeHostPool``,
    ``"unified-token-major"``): its physical pages move under compaction, so page addresses
    probed once (as the adapter does) would read and write the wrong bytes;
  - layouts ``page_unified`` (a fused per-head-group K/V block) and ``page_first_kv_split``
    (Ascend: separate K and V buffers), which the adapter has no page description for;
  - ``page_head`` while SGLang splits heads across a heterogeneous TP
    (``storage_config.should_split_heads``, from ``tp_lcm_size``): SGLang's own backends then
    store one object per virtual rank and head group, which the adapter does not write.

  ``page_head`` without a head split is an ordinary page-contiguous layout and is served.
"""

from __future__ import annotations

from typing import Any

from .spec import HiCacheStorage

__all__ = ["UNSERVABLE_LAYOUTS", "implements_v1", "unservable_pool"]

SGLANG_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"

#: Host-pool layouts the bridge refuses outright, with why.
UNSERVABLE_LAYOUTS: dict[str, str] = {
    "page_unified": "a fused per-head-group K/V block the adapter has no page description for",
    "page_first_kv_split": "separate K and V buffers per page (Ascend) the adapter has no page description for",
}


def _is_abc_default(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is inherited from our ``HiCacheStorage`` or SGLang's ABC."""
    for klass in cls.__mro__:
        if name in vars(klass):
            if klass is HiCacheStorage:
                return True
            return klass.__name__ == "HiCacheStorage" and klass.__module__ == SGLANG_STORAGE_MODULE
    return True  # not defined anywhere: certainly not implemented


def implements_v1(backend: Any) -> bool:
    """``True`` when ``backend`` (a backend class or instance) overrides both
    ``batch_get_v1`` and ``batch_set_v1`` (an override that still raises
    ``NotImplementedError`` at call time is the backend's own bug; SGLang would then count
    every page as a miss, as it does for any failure)."""
    cls = backend if isinstance(backend, type) else type(backend)
    return not (_is_abc_default(cls, "batch_get_v1") or _is_abc_default(cls, "batch_set_v1"))


def unservable_pool(pool: Any, name: str, storage_config: Any) -> str | None:
    """Why the bridge cannot serve host pool ``pool`` registered as ``name`` (``None``
    when it can); see the module docs for the rules."""
    tag = getattr(pool, "storage_format_tag", None)
    if tag:
        return (
            f"host pool {name!r} ({type(pool).__name__}) is a unified page-envelope pool "
            f"(storage_format_tag {tag!r}): its physical pages move under compaction, so the "
            "SDK's page addresses would be stale; run SGLang without the unified host pool "
            "to use an L3 backend through the bridge"
        )
    layout = str(getattr(pool, "layout", ""))
    why = UNSERVABLE_LAYOUTS.get(layout)
    if why is not None:
        return f"host pool {name!r} has layout {layout!r}: {why}; use page_first or page_first_direct"
    if layout == "page_head" and bool(getattr(storage_config, "should_split_heads", False)):
        lcm = getattr(storage_config, "tp_lcm_size", None)
        return (
            f"host pool {name!r} has layout 'page_head' with heads split across a heterogeneous "
            f"TP (tp_lcm_size={lcm!r}, should_split_heads=True): the bridge does not write SGLang's "
            "per-virtual-rank head-group objects; drop tp_lcm_size or use page_first"
        )
    return None
