"""SGLang's unified cache linker over any hicache-sdk backend (:class:`TransportLinker`).

Importing this package needs SGLang 0.5.23 or later (the linker's base class lives there);
``hicache_sdk.sglang`` itself never imports it.
"""

from __future__ import annotations

from .linker import LinkerLoadError, TransportLinker
from .setup import LINKER_KEYS, LinkerSettings
from .view import DeviceKVView, layer_ranges

__all__ = [
    "LINKER_CONFIG",
    "LINKER_KEYS",
    "DeviceKVView",
    "LinkerLoadError",
    "LinkerSettings",
    "TransportLinker",
    "layer_ranges",
]

#: The loader keys of ``--unified-cache-external-linker-config`` for :class:`TransportLinker`.
LINKER_CONFIG = {"linker": "TransportLinker", "linker_module_path": "hicache_sdk.sglang.linker"}
