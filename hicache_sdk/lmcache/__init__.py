"""LMCache bindings: any hicache-sdk backend as LMCache's storage (``pip install 'hicache-sdk[lmcache]'``).

* :class:`L2Adapter` / :class:`L2AdapterConfig` (:mod:`.l2`): LMCache's multiprocess L2
  adapter, loaded by ``lmcache server --l2-adapter '{"type": "plugin", "module_path":
  "hicache_sdk.lmcache", "class_name": "L2Adapter", "adapter_params": {...}}'``.
* :class:`ConnectorAdapter` / :class:`TransportConnector` (:mod:`.connector`): LMCache's
  in-process remote connector, a ``remote_storage_plugins`` entry (``plugin://hicache``).
* :mod:`.keys`: the ``lmc1`` object names; :mod:`.objects`: the layout record stored with
  each chunk; :mod:`.settings`: ``adapter_params``. These import nothing of LMCache.

Importing ``hicache_sdk`` never imports LMCache; this package imports it only when
:class:`L2Adapter`, :class:`ConnectorAdapter` (or their companions) is first asked for (a missing LMCache is a
:class:`~hicache_sdk._extras.MissingExtraError` naming the extra). Nothing here imports
the SGLang bridge (:mod:`hicache_sdk.sglang`), nor the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .keys import SCHEME, NameMaker, object_name
from .settings import L2Settings

if TYPE_CHECKING:  # pragma: no cover
    from .connector import ConnectorAdapter, TransportConnector
    from .l2 import L2Adapter, L2AdapterConfig

__all__ = [
    "SCHEME",
    "ConnectorAdapter",
    "L2Adapter",
    "L2AdapterConfig",
    "L2Settings",
    "NameMaker",
    "TransportConnector",
    "object_name",
]

_LAZY = {
    "L2Adapter": ".l2",
    "L2AdapterConfig": ".l2",
    "ConnectorAdapter": ".connector",
    "TransportConnector": ".connector",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .._extras import require

    require("lmcache", "lmcache", what=f"hicache_sdk.lmcache.{name}")
    import importlib

    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
