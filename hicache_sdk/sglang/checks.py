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

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

from ..spec import HiCacheStorage

__all__ = ["UNSERVABLE_LAYOUTS", "choose_interface_v1", "implements_v1", "unservable_pool"]

log = logging.getLogger("hicache_sdk.sglang")

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


def choose_interface_v1(inner: Any, backend_name: str, extra: Mapping[str, Any]) -> bool:
    """Set ``extra["interface_v1"]`` (SGLang reads it from this very dict after constructing
    the bridge) from what ``inner`` implements, and return the choice: a backend without
    ``batch_get_v1``/``batch_set_v1`` gets the generic path even when the flags asked for v1
    (else SGLang would call the ABC's empty v1 defaults and count every page as a miss); a v1
    backend gets v1 unless the flags turned it off explicitly (a falsy value). A read-only
    ``extra`` is left alone (logged when that changes the outcome)."""
    has_v1 = implements_v1(inner)
    requested = extra.get("interface_v1")
    chosen = has_v1 if requested is None else (has_v1 and bool(requested))
    if requested is not None and bool(requested) and not has_v1:
        log.warning(
            "backend %r (%s) does not implement batch_get_v1/batch_set_v1: interface_v1 turned "
            "off, SGLang uses the generic batch_get/batch_set path",
            backend_name,
            type(inner).__name__,
        )
    if isinstance(extra, MutableMapping):
        extra["interface_v1"] = 1 if chosen else 0
    elif bool(requested) != chosen:
        log.warning("extra_config is read-only: cannot set interface_v1=%d for SGLang", int(chosen))
    return chosen


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
