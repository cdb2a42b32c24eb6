"""SGLang's own result types at the bridge boundary (:mod:`hicache_sdk.sglang`).

Inside SGLang the bridge returns SGLang's ``PoolTransferResult`` from ``batch_exists_v2``
and SGLang's ``StorageMetrics`` from ``get_stats`` (SGLang's metrics logger asserts
``isinstance(..., StorageMetrics)``); without SGLang it returns the inner backend's objects
(ours, from :mod:`hicache_sdk.spec`), unchanged.

* ``PoolTransferResult`` lives in SGLang's ``hicache_storage`` module, which is always loaded
  when the bridge is SGLang's subclass (the bridge imports it to subclass it).
* ``StorageMetrics`` lives in the installed release's metrics module (the profile's
  ``storage_metrics_module``: ``sglang.srt.metrics.collector`` before 0.5.11,
  ``sglang.srt.observability.metrics_collector`` since), which
  ``hicache_storage`` does not import. When SGLang's storage module is loaded but the metrics
  module is not yet, it is imported on first use (once); a failed import (a broken install)
  is logged once and ``get_stats`` then returns the inner object -- never an exception.

``batch_get_v2`` / ``batch_set_v2`` results need no conversion: SGLang declares them as a plain
``dict[str, List[bool]]``, and SGLang's ``PoolName`` is a ``str`` enum, so SGLang's lookups
by ``PoolName`` find our ``"kv"``-style keys.

Conversion copies the fields the SGLang dataclass declares (by name) from the inner object;
a field the inner object lacks takes SGLang's default. ``None`` and objects already of the
target class pass through.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import threading
from typing import Any

from .versions import CURRENT

__all__ = [
    "SGLANG_METRICS_MODULE",
    "SGLANG_STORAGE_MODULE",
    "convert_dataclass",
    "to_sglang_metrics",
    "to_sglang_transfer_result",
]

log = logging.getLogger(__name__)

#: SGLang's module holding its ``HiCacheStorage`` ABC and transfer types.
SGLANG_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
#: SGLang's module holding ``StorageMetrics`` (what its metrics logger expects), in the
#: installed release.
SGLANG_METRICS_MODULE = CURRENT.storage_metrics_module

_import_lock = threading.Lock()
_metrics_import_failed = False


def _loaded_attr(module: str, name: str) -> Any:
    """``module.name`` if SGLang's ``module`` is already loaded, else ``None``."""
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def _metrics_class() -> Any:
    """SGLang's ``StorageMetrics``: from the loaded module, else imported once when SGLang's
    storage module is loaded (SGLang is present), else ``None``."""
    global _metrics_import_failed
    cls = _loaded_attr(SGLANG_METRICS_MODULE, "StorageMetrics")
    if cls is not None or _metrics_import_failed or SGLANG_STORAGE_MODULE not in sys.modules:
        return cls
    with _import_lock:
        if _metrics_import_failed:
            return None
        try:
            mod = importlib.import_module(SGLANG_METRICS_MODULE)
        except Exception as e:  # a broken SGLang install: keep our own metrics object
            _metrics_import_failed = True
            log.warning(
                "SGLang is loaded but %s does not import (%s: %s); get_stats returns "
                "hicache-sdk's StorageMetrics",
                SGLANG_METRICS_MODULE,
                type(e).__name__,
                e,
            )
            return None
    return getattr(mod, "StorageMetrics", None)


def convert_dataclass(value: Any, target: Any) -> Any:
    """Copy the fields ``target`` (a dataclass type) declares from ``value``; return
    ``value`` unchanged when it is ``None``, already a ``target``, or ``target`` is not a
    dataclass type."""
    if value is None or not isinstance(target, type) or isinstance(value, target):
        return value
    if not dataclasses.is_dataclass(target):
        return value
    kwargs = {f.name: getattr(value, f.name) for f in dataclasses.fields(target) if hasattr(value, f.name)}
    return target(**kwargs)


def to_sglang_transfer_result(result: Any) -> Any:
    """``result`` as SGLang's ``PoolTransferResult`` when SGLang's storage module is loaded."""
    return convert_dataclass(result, _loaded_attr(SGLANG_STORAGE_MODULE, "PoolTransferResult"))


def to_sglang_metrics(stats: Any) -> Any:
    """``stats`` as SGLang's ``StorageMetrics`` when SGLang is loaded (see the module doc)."""
    if stats is None:
        return None
    return convert_dataclass(stats, _metrics_class())
